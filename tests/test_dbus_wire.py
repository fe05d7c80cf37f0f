"""The fast D-Bus reply reader of the AT-SPI tree agrees with jeepney's own parser."""
from __future__ import annotations

import random

from jeepney import DBusAddress, new_error, new_method_call, new_method_return, new_signal

from embodia.devices.dbus_wire import ReplyReader, decoder

CASES = [
    ("a{sv}", ({"Name": ("s", "héllo ✓"), "Parent": ("(so)", (":1.2", "/o/p")), "ChildCount": ("i", -5),
                "Locale": ("as", ["a", "bc"]), "Big": ("t", 2**63)},)),
    ("au", ([1, 2**31 + 5],)),
    ("(iiii)", ((1, -2, 3, 4),)),
    ("a(so)", ([(":1.2", "/a/b"), (":1.30", "/c")],)),
    ("s", ("",)),
    ("b", (True,)),
    ("ay", (b"xyz",)),
    ("x(yd)as", (-5, (3, 1.5), [])),
    ("a{si}v", ({}, ("a(ii)", [(1, 2)]))),
]


def _stream() -> tuple[bytes, list]:
    call = new_method_call(DBusAddress("/a", bus_name="x.y", interface="i.j"), "M")
    out, want = b"", []
    for i, (sig, body) in enumerate(CASES):
        call.header.serial = 100 + i
        out += new_method_return(call, sig, body).serialise(serial=i + 1)
        want.append((2, 100 + i, body))
        if i == 3:        # an error reply and a signal in between
            call.header.serial = 99
            out += new_error(call, "org.x.Failed", "s", ("no",)).serialise(serial=50)
            want.append((3, 99, None))
            out += new_signal(DBusAddress("/s", interface="i.j"), "Changed").serialise(serial=51)
    return out, want


def test_replies_match_jeepney_bodies_whole_and_in_pieces():
    data, want = _stream()
    r = ReplyReader()
    r.feed(data)
    assert r.replies() == want
    rng = random.Random(0)          # the same stream cut at random places: nothing lost or doubled
    r, got, i = ReplyReader(), [], 0
    while i < len(data):
        n = rng.randint(1, 40)
        r.feed(data[i:i + n])
        got += r.replies()
        i += n
    assert got == want and not r.buf


def test_decoder_is_kept_per_signature():
    assert decoder("u(ii)") is decoder("u(ii)")
    assert decoder("u(ii)")(bytes([3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]), 0) == (3, (1, 2))
