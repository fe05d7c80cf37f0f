"""AndroidDevice against the fake adb server: what the phone's shell would execute, exactly."""
import subprocess
import sys
import threading
from pathlib import Path

import fakeadb
import numpy as np
import pytest
from fakeadb import ADB_KEYBOARD, FakePhone

from embodia.devices.actions import ActionError, GuiAction
from embodia.devices.android import AndroidDevice, open_android
from embodia.devices.base import DeviceLost
from embodia.devices.gui import SCREEN

fake_adb, new_fake_adb = fakeadb.fake_adb, fakeadb.new_fake_adb      # fixtures

HOSTILE = ["a; reboot", "$(id)", "`id`", "\"quoted\" 'single' \\back", "100%", "50%sale %%s end",
           "  two  spaces ", "-n dash first", "*glob? [x] {a,b} ~ #c", "a && b || c | d > /e < f"]


def phone_device(server, **kw) -> AndroidDevice:
    return open_android("emulator-5554", host="127.0.0.1", port=server.port, **kw)


@pytest.fixture
def phone(fake_adb):
    with phone_device(fake_adb) as dev:
        yield dev


def sent(server, since=0):
    """The argv lists the phone ran after the first ``since``, minus IME status queries."""
    return [c for c in server.phone.commands[since:] if c[:2] != ["settings", "get"]]


def act(dev, server, *args, **kw):
    n = len(server.phone.commands)
    dev.act(GuiAction(*args, **kw))
    assert server.phone.hazards == []
    return sent(server, n)


# -- opening ---------------------------------------------------------------------------------------
def test_embodiment_comes_from_wm_size_and_density(phone):
    e = phone.embodiment
    assert (e.name, e.kind) == ("android:emulator-5554", "gui-phone")
    assert (e.screen.width, e.screen.height, e.screen.pixel_ratio) == (1080, 2400, 420 / 160)


def test_override_size_wins(new_fake_adb):
    server = new_fake_adb(FakePhone(override_size=(720, 1600)))
    with phone_device(server) as dev:
        assert (dev.embodiment.screen.width, dev.embodiment.screen.height) == (720, 1600)
        assert act(dev, server, "click", point=(500, 500)) == [["input", "tap", "360", "800"]]


def test_empty_serial_picks_the_only_device_and_refuses_zero_or_several(fake_adb):
    with open_android("", port=fake_adb.port) as dev:
        assert dev.serial == "emulator-5554"
    fake_adb.phones["R58M123"] = FakePhone("R58M123")
    with pytest.raises(DeviceLost, match=r"2 devices \(emulator-5554, R58M123\).*android:<serial>"):
        open_android("", port=fake_adb.port)
    fake_adb.phones.clear()
    with pytest.raises(DeviceLost, match="no Android device.*127.0.0.1:%d" % fake_adb.port):
        open_android("", port=fake_adb.port)


def test_unknown_serial_and_unknown_options_are_refused(fake_adb):
    with pytest.raises(DeviceLost, match="'nope'.*not found"):
        open_android("nope", port=fake_adb.port)
    with pytest.raises(TypeError):
        open_android("emulator-5554", port=fake_adb.port, colour="red")
    with pytest.raises(ValueError, match="size"):
        open_android("emulator-5554", port=fake_adb.port, size="64x64")


def test_server_port_comes_from_the_environment(fake_adb):
    with open_android("emulator-5554") as dev:       # fixture set ANDROID_ADB_SERVER_PORT
        assert dev.port == fake_adb.port


# -- pointer actions -----------------------------------------------------------------------------
@pytest.mark.parametrize("point, pixel", [((500, 500), (540, 1200)), ((0, 0), (0, 0)),
                                           ((1000, 1000), (1079, 2399)), ((250, 100), (270, 240))])
def test_click_maps_0_1000_to_the_pixel(phone, fake_adb, point, pixel):
    assert act(phone, fake_adb, "click", point=point) == [["input", "tap", *map(str, pixel)]]


def test_double_click_is_two_taps_in_one_round_trip(phone, fake_adb):
    lines = len(fake_adb.phone.lines)
    assert act(phone, fake_adb, "double_click", point=(500, 500)) == [["input", "tap", "540", "1200"]] * 2
    assert len(fake_adb.phone.lines) == lines + 1


def test_long_press_swipe_and_drag_durations(phone, fake_adb):
    assert act(phone, fake_adb, "long_press", point=(500, 500)) == [
        ["input", "swipe", "540", "1200", "540", "1200", "800"]]
    assert act(phone, fake_adb, "long_press", point=(500, 500), duration_ms=1500) == [
        ["input", "swipe", "540", "1200", "540", "1200", "1500"]]
    assert act(phone, fake_adb, "swipe", point=(500, 800), end=(500, 200)) == [
        ["input", "swipe", "540", "1920", "540", "480", "300"]]
    assert act(phone, fake_adb, "drag", point=(100, 100), end=(900, 900), duration_ms=2000) == [
        ["input", "swipe", "108", "240", "972", "2160", "2000"]]


def test_scroll_swipes_against_the_direction_from_the_point(phone, fake_adb):
    # scroll down = show what is below: the finger goes up by 40% of the screen height
    assert act(phone, fake_adb, "scroll", point=(500, 500), direction="down") == [
        ["input", "swipe", "540", "1200", "540", "240", "300"]]
    assert act(phone, fake_adb, "scroll", point=(500, 500), direction="right") == [
        ["input", "swipe", "540", "1200", "108", "1200", "300"]]
    # clamped to the screen
    assert act(phone, fake_adb, "scroll", point=(500, 900), direction="up") == [
        ["input", "swipe", "540", "2160", "540", "2399", "300"]]


def test_click_on_a_ui_element_taps_its_centre(phone, fake_adb):
    obs = phone.observe()
    ok = next(e for e in obs.ui_tree if e["text"] == "OK")
    assert act(phone, fake_adb, "click", element=ok["index"]) == [["input", "tap", "540", "1200"]]
    assert fake_adb.phone.clicked == ["com.example:id/ok"]


def test_rotated_screen_maps_to_landscape_pixels(new_fake_adb):
    server = new_fake_adb(FakePhone(rotation=1))
    with phone_device(server) as dev:
        assert dev.observe().images[SCREEN].shape == (1080, 2400, 3)
        assert act(dev, server, "click", point=(500, 250)) == [["input", "tap", "1200", "270"]]


# -- keys, buttons, apps -----------------------------------------------------------------------------
@pytest.mark.parametrize("button, code", [("back", "KEYCODE_BACK"), ("home", "KEYCODE_HOME"),
                                          ("enter", "KEYCODE_ENTER"), ("menu", "KEYCODE_MENU")])
def test_system_buttons(phone, fake_adb, button, code):
    assert act(phone, fake_adb, "system_button", button=button) == [["input", "keyevent", code]]


@pytest.mark.parametrize("keys, argv", [
    (("enter",), ["keyevent", "KEYCODE_ENTER"]), (("KEYCODE_VOLUME_UP",), ["keyevent", "KEYCODE_VOLUME_UP"]),
    (("keycode_camera",), ["keyevent", "KEYCODE_CAMERA"]), (("66",), ["keyevent", "66"]),
    (("Backspace",), ["keyevent", "KEYCODE_DEL"]), (("x",), ["keyevent", "KEYCODE_X"]),
    (("ctrl", "a"), ["keycombination", "KEYCODE_CTRL_LEFT", "KEYCODE_A"]),
    (("ctrl+shift+z",), ["keycombination", "KEYCODE_CTRL_LEFT", "KEYCODE_SHIFT_LEFT", "KEYCODE_Z"])])
def test_keys(phone, fake_adb, keys, argv):
    assert act(phone, fake_adb, "key", keys=keys) == [["input", *argv]]


@pytest.mark.parametrize("key", ["KEYCODE_BACK; reboot", "$(id)", "KEYCODE_", "KEYCODE_HOME ",
                                 "1234", "-1", "hyper", "`id`", "KEYCODE_A\nreboot", "é",
                                 "keycode_ß", "\u0666\u0666", ""])
def test_bad_key_names_are_refused_before_anything_is_sent(phone, fake_adb, key):
    n = len(fake_adb.phone.commands)
    with pytest.raises(ActionError, match="unknown key|must be non-empty strings"):
        phone.act(GuiAction("key", keys=(key,)))
    assert len(fake_adb.phone.commands) == n


def test_open_app_launches_through_monkey(phone, fake_adb):
    assert act(phone, fake_adb, "open_app", app="com.android.settings") == [
        ["monkey", "-p", "com.android.settings", "-c", "android.intent.category.LAUNCHER", "1"]]
    assert fake_adb.phone.launched == ["com.android.settings"]


def test_open_app_of_a_missing_package_is_an_action_error(phone, fake_adb):
    with pytest.raises(ActionError, match="com.example.missing.*No activities found"):
        phone.act(GuiAction("open_app", app="com.example.missing"))


@pytest.mark.parametrize("app", ["Settings", "com.x; reboot", "com.x && id", "$(id).x", "../com.x",
                                 "com..x", "1com.x", "com.x ", "com.x\n"])
def test_open_app_refuses_what_is_not_a_package_name(phone, fake_adb, app):
    n = len(fake_adb.phone.commands)
    with pytest.raises(ActionError, match="package name"):
        phone.act(GuiAction("open_app", app=app))
    assert len(fake_adb.phone.commands) == n


def test_error_output_of_a_command_is_an_action_error(phone, fake_adb, monkeypatch):
    monkeypatch.setattr(fake_adb.phone, "_input", lambda args: b"Error: Unknown command: tap\n")
    with pytest.raises(ActionError, match="click failed on emulator-5554: Error: Unknown command"):
        phone.act(GuiAction("click", point=(1, 1)))


# -- text -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", HOSTILE)
def test_ascii_text_arrives_literally_as_one_argument(phone, fake_adb, text):
    cmds = act(phone, fake_adb, "type", text=text)
    assert all(c[:2] == ["input", "text"] and len(c) == 3 for c in cmds), cmds
    assert fake_adb.phone.typed == text


def test_text_is_single_quoted_on_the_wire(phone, fake_adb):
    phone.act(GuiAction("type", text="it's $(id)"))
    assert fake_adb.phone.lines[-1] == "input text 'it'\\''s%s$(id)'"


def test_percent_s_is_split_so_input_does_not_make_it_a_space(phone, fake_adb):
    assert act(phone, fake_adb, "type", text="50%sale 100%") == [
        ["input", "text", "50%"], ["input", "text", "sale%s100%"]]
    assert fake_adb.phone.typed == "50%sale 100%"


def test_newlines_and_tabs_are_enter_and_tab_keys(phone, fake_adb):
    assert act(phone, fake_adb, "type", text="one\ntwo\tthree\r\n") == [
        ["input", "text", "one"], ["input", "keyevent", "KEYCODE_ENTER"], ["input", "text", "two"],
        ["input", "keyevent", "KEYCODE_TAB"], ["input", "text", "three"],
        ["input", "keyevent", "KEYCODE_ENTER"]]
    assert fake_adb.phone.typed == "one\ntwo\tthree\n"


def test_long_text_is_split_over_several_lines_of_bounded_size(phone, fake_adb):
    text = ("word' " * 2000).strip()
    act(phone, fake_adb, "type", text=text)
    assert fake_adb.phone.typed == text
    assert max(len(line.encode()) for line in fake_adb.phone.lines) < 4000


def test_control_characters_are_refused(phone, fake_adb):
    n = len(fake_adb.phone.commands)
    with pytest.raises(ActionError, match="control characters"):
        phone.act(GuiAction("type", text="ok\x1b[2J\x00"))
    assert len(fake_adb.phone.commands) == n


@pytest.mark.parametrize("text", ["héllo 你好", "naïve; $(id)\n`ü` 100%s", "emoji 🙂"])
def test_non_ascii_goes_through_the_adb_keyboard_broadcast(new_fake_adb, text):
    server = new_fake_adb(FakePhone(ime=True))
    with phone_device(server) as dev:
        cmds = act(dev, server, "type", text=text)
        assert {c[0] for c in cmds} <= {"am", "input"}
        assert all(c[:6] == ["am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg"]
                   and len(c) == 7 for c in cmds if c[0] == "am")
        assert server.phone.typed == text


def test_long_non_ascii_text_is_split_into_bounded_broadcasts(new_fake_adb):
    server = new_fake_adb(FakePhone(ime=True))
    with phone_device(server) as dev:
        text = "你好, wörld 🙂 " * 300
        dev.act(GuiAction("type", text=text))
        assert server.phone.typed == text and server.phone.hazards == []
        assert max(len(line.encode()) for line in server.phone.lines) < 4000


def test_non_ascii_without_the_ime_is_refused_and_nothing_is_typed(phone, fake_adb):
    n = len(fake_adb.phone.commands)
    with pytest.raises(ActionError, match="ADBKeyboard.*ime set com.android.adbkeyboard/.AdbIME.*"
                                          "Nothing was typed"):
        phone.act(GuiAction("type", text="abc héllo 你好"))
    assert sent(fake_adb, n) == [] and fake_adb.phone.typed == ""


def test_ime_option_selects_adb_keyboard_and_close_restores_the_previous_one(new_fake_adb):
    server = new_fake_adb(FakePhone(ime=False, ime_installed=True))
    dev = phone_device(server, ime="adbkeyboard")
    assert server.phone.input_method == ADB_KEYBOARD
    dev.act(GuiAction("type", text="héllo"))
    dev.close()
    assert server.phone.typed == "héllo" and server.phone.input_method != ADB_KEYBOARD
    with pytest.raises(ActionError, match="ADBKeyboard|adbkeyboard"):
        phone_device(server, ime="none").act(GuiAction("type", text="é"))


def test_ime_option_fails_clearly_when_adb_keyboard_is_not_installed(fake_adb):
    with pytest.raises(ActionError, match="not installed"):
        phone_device(fake_adb, ime="adbkeyboard")


# -- observation -------------------------------------------------------------------------------------
def test_observe_gives_the_screenshot_and_the_ui_tree(phone, fake_adb):
    phone.act(GuiAction("click", point=(100, 100)))       # the fake paints a red dot there
    obs = phone.observe()
    img = obs.images[SCREEN]
    assert img.shape == (2400, 1080, 3) and img.dtype == np.uint8
    assert tuple(img[1200, 540]) == (60, 120, 200)         # the OK button
    assert tuple(img[240, 108]) == (220, 30, 30)
    assert ("emulator-5554", "exec:screencap") in fake_adb.log   # the raw framebuffer path
    assert obs.screen.width == 1080 and obs.screen.pixel_ratio == 420 / 160
    by_text = {e["text"]: e for e in obs.ui_tree}
    assert by_text["OK"] == {"index": 3, "role": "android.widget.Button", "text": "OK", "desc": "",
                             "id": "com.example:id/ok", "bounds": [390, 1100, 690, 1300],
                             "clickable": True, "password": False, "focused": False}
    pw = next(e for e in obs.ui_tree if e["password"])
    assert (pw["desc"], pw["focused"], pw["role"]) == ("Password", True, "android.widget.EditText")
    assert set(phone.timing) >= {"screenshot", "ui_tree", "act"}


@pytest.mark.parametrize("kw", [{"exec_service": False}, {"raw_header": 12}])
def test_screenshot_paths(new_fake_adb, kw):
    server = new_fake_adb(FakePhone(**kw))
    with phone_device(server) as dev:
        img = dev.observe().images[SCREEN]
        assert img.shape == (2400, 1080, 3) and tuple(img[1200, 540]) == (60, 120, 200)
        assert dev.capture == ("png-shell" if kw.get("exec_service") is False else "raw")


def test_failed_ui_dump_gives_no_tree(new_fake_adb):
    server = new_fake_adb(FakePhone(ui_xml=None))
    with phone_device(server) as dev:
        assert dev.observe().ui_tree is None


def test_one_action_costs_one_request_after_the_server_version_is_known(phone, fake_adb):
    n = len(fake_adb.log)
    phone.act(GuiAction("click", point=(500, 500)))
    assert fake_adb.log[n:] == [("", "host:tport:serial:emulator-5554"),
                                ("emulator-5554", "shell:input tap 540 1200")]


# -- losing the device -------------------------------------------------------------------------------
def test_killed_server_makes_the_next_act_and_observe_raise_device_lost(phone, fake_adb):
    phone.act(GuiAction("click", point=(500, 500)))
    fake_adb.stop()
    with pytest.raises(DeviceLost, match=f"'emulator-5554'.*127.0.0.1:{fake_adb.port}"):
        phone.act(GuiAction("click", point=(500, 500)))
    with pytest.raises(DeviceLost):
        phone.observe()


def test_unplugged_device_raises_device_lost(phone, fake_adb):
    fake_adb.unplug("emulator-5554")
    with pytest.raises(DeviceLost, match="not found"):
        phone.act(GuiAction("system_button", button="back"))


def test_server_killed_during_a_request_raises_device_lost(phone, fake_adb):
    fake_adb.phone.stall = True
    errors = []

    def tap():
        try:
            phone.act(GuiAction("click", point=(500, 500)))
        except Exception as e:      # noqa: BLE001 - the test inspects what came out
            errors.append(e)
    n = len(fake_adb.log)
    t = threading.Thread(target=tap)
    t.start()
    while not any(cmd.startswith("shell:") for _, cmd in fake_adb.log[n:]) and t.is_alive():
        t.join(0.01)
    fake_adb.stop()
    t.join(5)
    assert not t.is_alive() and len(errors) == 1 and isinstance(errors[0], DeviceLost), errors


def test_module_imports_without_adbutils():
    code = ("import sys; sys.modules['adbutils'] = None; import embodia.devices.android as a\n"
            "try:\n    a.open_android('x', port=1)\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert "pip install adbutils" in out.stdout, out.stderr
