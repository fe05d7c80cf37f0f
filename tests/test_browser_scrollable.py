"""The browser tree flags what a wheel turn can move: an element whose content overflows its box
and whose style lets it scroll (a text area holding more than it shows, an ``overflow: auto``
list), even where the page marks nothing; a box whose overflow is clipped or visible, or whose
content fits, is not flagged. Real headless Chromium on a local file."""
import pytest

from embodia.devices import GuiAction, open_device
from embodia.devices.cdp import find_chromium

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt-get install chromium)")

LONG = " ".join(f"word{k}" for k in range(400))
PAGE = f"""<!doctype html><html><head><meta charset="utf-8"><title>Overflow</title>
<style>body{{font:14px sans-serif;margin:10px}} .box{{width:200px;height:60px;margin:6px}}</style></head><body>
<textarea id="long" rows="3" cols="30" aria-label="Agreement">{LONG}</textarea>
<textarea id="short" rows="3" cols="30" aria-label="Notes">two words</textarea>
<div id="auto" class="box" style="overflow:auto" onclick="0"><p>{LONG}</p></div>
<div id="hidden" class="box" style="overflow:hidden" onclick="0"><p>{LONG}</p></div>
<div id="visible" class="box" style="overflow:visible" onclick="0"><p>{LONG[:200]}</p></div>
</body></html>"""


def test_overflowing_boxes_are_flagged_scrollable_and_a_wheel_there_moves_them(tmp_path):
    page = tmp_path / "overflow.html"
    page.write_text(PAGE, encoding="utf-8")
    with open_device(f"browser:file://{page}?size=800x700") as dev:
        obs = dev.reset(0)
        by_id = {e["id"]: e for e in obs.ui_tree if e.get("id")}
        assert {k: by_id[k]["scrollable"] for k in ("long", "short", "auto", "hidden")} == \
            {"long": True, "short": False, "auto": True, "hidden": False}
        assert not by_id.get("visible", {}).get("scrollable")
        assert "scrollable" in dev.element_fields
        dev.act(GuiAction("scroll", element=by_id["long"]["index"], direction="down"))
        assert dev.evaluate("document.getElementById('long').scrollTop") > 0
