"""Feature set 3 of the GUI head (`embodia.policies.gui.head_context`): what a web page's layout
says that set 2 left to be learnt from a few demos. The trees are MiniWoB++ pages as the browser
device read them (from step logs of the set-2 head's evaluation, where it failed on them)."""
import hashlib

import numpy as np
import pytest

from embodia.agent.loop.factory import BUNDLED
from embodia.policies.backbone import Backbone
from embodia.policies.gui.head_encoding import ACTIONS_V2, CHORDS, GuiHeadConfig, SequenceBuilder

TINY = BUNDLED["embodia-tiny"]


def _panel(first: int, seconds: int) -> list[dict]:
    """MiniWoB++'s side panel (last reward, average, time left, episodes done) as the tree reads it,
    its elements numbered from ``first``."""
    texts = ["Last reward:", "-", "Last 10 average:", "-", "Time left:", f"{seconds} / {seconds}sec",
             "Episodes done:", "0"]
    bounds = [[170, 10, 248, 26], [250, 10, 256, 26], [170, 36, 275, 52], [278, 36, 283, 52],
              [170, 62, 228, 78], [230, 62, 298, 78], [170, 88, 267, 104], [270, 88, 279, 104]]
    return [{"index": first + k, "role": "label", "text": t, "bounds": b} for k, (t, b) in enumerate(zip(texts, bounds))]

READ_TABLE = ('Enter the value of Gender into the text field and press Submit.', [
    {'index': 0, 'role': 'label', 'text': 'Enter the value of', 'bounds': [3, 3, 85, 14]},
    {'index': 1, 'role': 'label', 'text': 'Gender', 'bounds': [84, 3, 120, 14]},
    {'index': 2, 'role': 'label', 'text': 'into the text field and press Submit.', 'bounds': [3, 3, 155, 25]},
    {'index': 3, 'role': 'table cell', 'text': 'Gender', 'bounds': [7, 57, 90, 72]},
    {'index': 4, 'role': 'table cell', 'text': 'Male', 'bounds': [89, 57, 155, 72]},
    {'index': 5, 'role': 'table cell', 'text': 'Color', 'bounds': [7, 71, 90, 86]},
    {'index': 6, 'role': 'table cell', 'text': 'white', 'bounds': [89, 71, 155, 86]},
    {'index': 7, 'role': 'table cell', 'text': 'Last name', 'bounds': [7, 85, 90, 100]},
    {'index': 8, 'role': 'table cell', 'text': 'Padilla', 'bounds': [89, 85, 155, 100]},
    {'index': 9, 'role': 'table cell', 'text': 'First name', 'bounds': [7, 99, 90, 114]},
    {'index': 10, 'role': 'table cell', 'text': 'Hedvige', 'bounds': [89, 99, 155, 114]},
    {'index': 11, 'role': 'table cell', 'text': 'Language', 'bounds': [7, 113, 90, 128]},
    {'index': 12, 'role': 'table cell', 'text': 'French', 'bounds': [89, 113, 155, 128]},
    {'index': 13, 'role': 'entry', 'text': '', 'bounds': [7, 133, 135, 154], 'clickable': True, 'editable': True},
    {'index': 14, 'role': 'push button', 'text': 'Submit', 'bounds': [7, 154, 103, 185], 'clickable': True},
    *_panel(15, 10),
])
FIND_WORD = ('Find the 11th word in the paragraph, type that into the textbox and press "Submit".', [
    {'index': 0, 'role': 'label', 'text': 'Find the', 'bounds': [3, 3, 42, 14]},
    {'index': 1, 'role': 'label', 'text': '11th word', 'bounds': [41, 3, 90, 14]},
    {'index': 2, 'role': 'label', 'text': 'in the paragraph, type that into the textbox and press "Submit".', 'bounds': [3, 3, 129, 36]},
    {'index': 3, 'role': 'label', 'text': 'Nunc nibh a. Tempor massa erat feugiat vel vitae dolor rhoncus integer', 'bounds': [2, 62, 147, 95]},
    {'index': 4, 'role': 'entry', 'text': '', 'bounds': [2, 108, 130, 129], 'clickable': True, 'editable': True},
    {'index': 5, 'role': 'push button', 'text': 'Submit', 'bounds': [2, 132, 98, 163], 'clickable': True},
    *_panel(6, 10),
])
READ_TABLE_2 = ('Enter the value that corresponds with each label into the form and submit when done.', [
    {'index': 0, 'role': 'label', 'text': 'Enter the value that corresponds with each label into the form and submit when done.', 'bounds': [3, 3, 148, 36]},
    {'index': 1, 'role': 'table cell', 'text': 'Gender', 'bounds': [3, 54, 93, 71]},
    {'index': 2, 'role': 'table cell', 'text': 'Female', 'bounds': [92, 54, 156, 71]},
    {'index': 3, 'role': 'table cell', 'text': 'Language', 'bounds': [3, 70, 93, 87]},
    {'index': 4, 'role': 'table cell', 'text': 'Russian', 'bounds': [92, 70, 156, 87]},
    {'index': 5, 'role': 'table cell', 'text': 'Year of Birth', 'bounds': [3, 86, 93, 103]},
    {'index': 6, 'role': 'table cell', 'text': '2014', 'bounds': [92, 86, 156, 103]},
    {'index': 7, 'role': 'table cell', 'text': 'First name', 'bounds': [3, 102, 93, 119]},
    {'index': 8, 'role': 'table cell', 'text': 'Amil', 'bounds': [92, 102, 156, 119]},
    {'index': 9, 'role': 'table cell', 'text': 'Religion', 'bounds': [3, 118, 93, 135]},
    {'index': 10, 'role': 'table cell', 'text': 'Judaism', 'bounds': [92, 118, 156, 135]},
    {'index': 11, 'role': 'label', 'text': 'Language:', 'bounds': [5, 137, 53, 148]},
    {'index': 12, 'role': 'entry', 'text': '', 'bounds': [70, 137, 158, 151], 'clickable': True, 'editable': True},
    {'index': 13, 'role': 'label', 'text': 'Year of Birth:', 'bounds': [5, 152, 63, 163]},
    {'index': 14, 'role': 'entry', 'text': '', 'bounds': [70, 152, 158, 166], 'clickable': True, 'editable': True},
    {'index': 15, 'role': 'push button', 'text': 'Submit', 'bounds': [5, 167, 101, 198], 'clickable': True},
    *_panel(16, 20),
])
GRID = ('Click on the grid coordinate (1,2).', [
    {'index': 0, 'role': 'label', 'text': 'Click on the grid coordinate', 'bounds': [3, 3, 127, 14]},
    {'index': 1, 'role': 'label', 'text': '(1,2)', 'bounds': [126, 3, 148, 14]},
    {'index': 2, 'role': 'label', 'text': '.', 'bounds': [147, 3, 151, 14]},
    {'index': 3, 'role': 'graphics-symbol', 'text': '', 'bounds': [14, 64, 24, 74], 'clickable': True},
    {'index': 4, 'role': 'graphics-symbol', 'text': '', 'bounds': [14, 94, 24, 104], 'clickable': True},
    {'index': 5, 'role': 'graphics-symbol', 'text': '', 'bounds': [14, 124, 24, 134], 'clickable': True},
    {'index': 6, 'role': 'graphics-symbol', 'text': '', 'bounds': [14, 154, 24, 164], 'clickable': True},
    {'index': 7, 'role': 'graphics-symbol', 'text': '', 'bounds': [14, 184, 24, 194], 'clickable': True},
    {'index': 8, 'role': 'graphics-symbol', 'text': '', 'bounds': [44, 64, 54, 74], 'clickable': True},
    {'index': 9, 'role': 'graphics-symbol', 'text': '', 'bounds': [44, 94, 54, 104], 'clickable': True},
    {'index': 10, 'role': 'graphics-symbol', 'text': '', 'bounds': [44, 124, 54, 134], 'clickable': True},
    {'index': 11, 'role': 'graphics-symbol', 'text': '', 'bounds': [44, 154, 54, 164], 'clickable': True},
    {'index': 12, 'role': 'graphics-symbol', 'text': '', 'bounds': [44, 184, 54, 194], 'clickable': True},
    {'index': 13, 'role': 'graphics-symbol', 'text': '', 'bounds': [74, 64, 84, 74], 'clickable': True},
    {'index': 14, 'role': 'graphics-symbol', 'text': '', 'bounds': [74, 94, 84, 104], 'clickable': True},
    {'index': 15, 'role': 'graphics-symbol', 'text': '', 'bounds': [74, 124, 84, 134], 'clickable': True},
    {'index': 16, 'role': 'graphics-symbol', 'text': '', 'bounds': [74, 154, 84, 164], 'clickable': True},
    {'index': 17, 'role': 'graphics-symbol', 'text': '', 'bounds': [74, 184, 84, 194], 'clickable': True},
    {'index': 18, 'role': 'graphics-symbol', 'text': '', 'bounds': [104, 64, 114, 74], 'clickable': True},
    {'index': 19, 'role': 'graphics-symbol', 'text': '', 'bounds': [104, 94, 114, 104], 'clickable': True},
    {'index': 20, 'role': 'graphics-symbol', 'text': '', 'bounds': [104, 124, 114, 134], 'clickable': True},
    {'index': 21, 'role': 'graphics-symbol', 'text': '', 'bounds': [104, 154, 114, 164], 'clickable': True},
    {'index': 22, 'role': 'graphics-symbol', 'text': '', 'bounds': [104, 184, 114, 194], 'clickable': True},
    {'index': 23, 'role': 'graphics-symbol', 'text': '', 'bounds': [134, 64, 144, 74], 'clickable': True},
    {'index': 24, 'role': 'graphics-symbol', 'text': '', 'bounds': [134, 94, 144, 104], 'clickable': True},
    {'index': 25, 'role': 'graphics-symbol', 'text': '', 'bounds': [134, 124, 144, 134], 'clickable': True},
    {'index': 26, 'role': 'graphics-symbol', 'text': '', 'bounds': [134, 154, 144, 164], 'clickable': True},
    {'index': 27, 'role': 'graphics-symbol', 'text': '', 'bounds': [134, 184, 144, 194], 'clickable': True},
    {'index': 28, 'role': 'label', 'text': 'x', 'bounds': [148, 127, 155, 141]},
    {'index': 29, 'role': 'label', 'text': 'y', 'bounds': [69, 50, 76, 64]},
    {'index': 30, 'role': 'label', 'text': '0', 'bounds': [68, 132, 75, 146]},
    {'index': 31, 'role': 'label', 'text': '-2', 'bounds': [12, 132, 21, 143]},
    {'index': 32, 'role': 'label', 'text': '-1', 'bounds': [42, 132, 51, 143]},
    {'index': 33, 'role': 'label', 'text': '1', 'bounds': [105, 132, 111, 143]},
    {'index': 34, 'role': 'label', 'text': '2', 'bounds': [135, 132, 141, 143]},
    {'index': 35, 'role': 'label', 'text': '-2', 'bounds': [65, 185, 74, 196]},
    {'index': 36, 'role': 'label', 'text': '-1', 'bounds': [65, 155, 74, 166]},
    {'index': 37, 'role': 'label', 'text': '1', 'bounds': [67, 92, 73, 103]},
    {'index': 38, 'role': 'label', 'text': '2', 'bounds': [67, 62, 73, 73]},
    *_panel(39, 10),
])

INBOX = ('Find the email by Gates and click the trash icon to delete it.', [
    {'index': 0, 'role': 'label', 'text': 'Find the email by', 'bounds': [3, 3, 82, 14]},
    {'index': 1, 'role': 'label', 'text': 'Gates', 'bounds': [81, 3, 110, 14]},
    {'index': 2, 'role': 'label', 'text': 'and click the trash icon to delete it.', 'bounds': [3, 3, 152, 25]},
    {'index': 3, 'role': 'heading', 'text': 'Primary', 'bounds': [7, 52, 49, 72]},
    {'index': 4, 'role': 'image', 'text': '', 'bounds': [137, 55, 149, 67], 'clickable': True},
    {'index': 5, 'role': 'section', 'text': 'Kerrill Convallis volut.. Sit congue elem..', 'bounds': [2, 73, 157, 112], 'clickable': True},
    {'index': 6, 'role': 'image', 'text': '', 'bounds': [132, 80, 144, 92], 'clickable': True},
    {'index': 7, 'role': 'image', 'text': '', 'bounds': [118, 80, 130, 92], 'clickable': True},
    {'index': 8, 'role': 'section', 'text': 'Laraine Faucibus ut. Faucibus cras e..', 'bounds': [2, 112, 157, 151], 'clickable': True},
    {'index': 9, 'role': 'image', 'text': '', 'bounds': [132, 119, 144, 131], 'clickable': True},
    {'index': 10, 'role': 'image', 'text': '', 'bounds': [118, 119, 130, 131], 'clickable': True},
    {'index': 11, 'role': 'section', 'text': 'Gates Facilisis maece.. Lacus, dignissi..', 'bounds': [2, 151, 157, 190], 'clickable': True},
    {'index': 12, 'role': 'image', 'text': '', 'bounds': [132, 158, 144, 170], 'clickable': True},
    {'index': 13, 'role': 'image', 'text': '', 'bounds': [118, 158, 130, 170], 'clickable': True},
    {'index': 14, 'role': 'label', 'text': 'Last reward:', 'bounds': [170, 10, 248, 26]},
    {'index': 15, 'role': 'label', 'text': '-', 'bounds': [250, 10, 256, 26]},
])

PAGES = {"read-table": READ_TABLE, "find-word": FIND_WORD, "read-table-2": READ_TABLE_2, "grid": GRID, "inbox": INBOX}


@pytest.fixture(scope="module")
def backbone():
    return Backbone.from_pretrained(TINY / "backbone")


def _encode(backbone, features: int, page: str, instruction: str | None = None):
    instr, tree = PAGES[page]
    cfg = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True, features=features)
    screen = np.zeros((340, 500, 3), np.uint8)
    return SequenceBuilder(backbone, cfg).encode("", instruction or instr, ["click Submit"], tree, (500, 340), screen)


def _digest(enc) -> str:
    """Everything an encoding hands the head, hashed."""
    h = hashlib.sha256()
    for a in (enc.input_ids, enc.tok_unit, enc.tok_pos, enc.unit_meta, enc.elem_feats, enc.elem_role,
              enc.unit_ord, enc.elem_near):
        h.update(np.asarray(a).tobytes())
    h.update(repr((sorted(enc.tree_spans.items()), enc.elem_texts, enc.elem_index, enc.spans)).encode())
    return h.hexdigest()[:16]


# each page's encoding under feature sets 1 and 2, pinned from the code before set 3 was added
BEFORE_SET_3 = {
    (1, "read-table"): "1b5f4d40c444122c", (1, "find-word"): "d64013208cb24aac",
    (1, "read-table-2"): "8ed76758759dd0fd", (1, "grid"): "0656be1fb36dc4d3",
    (2, "read-table"): "f709403f21d6bf77", (2, "find-word"): "0126d41760b7b02d",
    (2, "read-table-2"): "e4151fdfa7d9bcd8", (2, "grid"): "4480cc26e0d0eb89",
}


def test_sets_1_and_2_encode_pages_exactly_as_before(backbone):
    from embodia.policies.gui.head import load_gui_head
    bundled, _, _ = load_gui_head(TINY, backbone)
    assert bundled.cfg.features == 1
    for (features, page), digest in BEFORE_SET_3.items():
        assert _digest(_encode(backbone, features, page)) == digest, (features, page)
        assert _encode(backbone, features, page).elem_lookup is None
    # the bundled head's own config reads a page as set 1 does
    instr, tree = PAGES["find-word"]
    enc = SequenceBuilder(backbone, bundled.cfg).encode("", instr, ["click Submit"], tree, (500, 340),
                                                        np.zeros((340, 500, 3), np.uint8))
    assert _digest(enc) == BEFORE_SET_3[(1, "find-word")]


def _marked_words(enc):
    return [enc.elem_texts[enc.tree_spans[u][0]][enc.tree_spans[u][1]:enc.tree_spans[u][2]]
            for u in np.flatnonzero(enc.unit_ord)]


def test_set_3_marks_the_asked_word_of_the_paragraph_not_of_the_instructions_copy(backbone):
    # set 2 marked the 11th unit-start of every element, the instruction's copy and the
    # punctuation after a word included; set 3 counts the paragraph's words only
    assert _marked_words(_encode(backbone, 3, "find-word")) == ["rhoncus"]
    assert "rhoncus" in _marked_words(_encode(backbone, 2, "find-word"))
    instr, tree = PAGES["find-word"]
    third = [dict(e, text="3rd word") if e["text"] == "11th word" else e for e in tree]
    cfg = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True, features=3)
    enc = SequenceBuilder(backbone, cfg).encode("", instr.replace("11th", "3rd"), [], third, (500, 340),
                                                np.zeros((340, 500, 3), np.uint8))
    # "a." is one word; the side panel reads as one text ("Last reward: - Last ..."), its 3rd word no word
    assert _marked_words(enc) == ["a"]
    copy = enc.elem_feats[:, -4]
    assert copy[:3].tolist() == [1, 1, 1] and copy[3:].sum() == 0


def test_an_ordinal_counts_words_across_a_paragraph_split_into_elements():
    from embodia.policies.gui.head_context import ordinal_marks
    para = [{"text": "Alpha beta.", "bounds": [0, 60, 60, 72]}, {"text": "Gamma", "bounds": [61, 60, 90, 72]},
            {"text": "delta epsilon", "bounds": [0, 73, 80, 85]}, {"text": "Go", "clickable": True, "bounds": [0, 90, 20, 99]},
            {"text": "zeta eta theta", "bounds": [0, 120, 90, 132]}]
    marks = ordinal_marks(para, [False] * len(para), {3, 4})
    # the 3rd and 4th words of the paragraph, across its elements; a text after a button is another block
    assert sorted(para[i]["text"][a:a + 5] for i, a in marks) == ["Gamma", "delta", "theta"]


def test_a_field_takes_the_value_beside_the_key_its_label_or_the_instruction_names(backbone):
    from embodia.agent.training.gui_data import GuiStep
    from embodia.devices import GuiAction, Screen
    from embodia.policies.gui.head_labels import label, span_text
    enc = _encode(backbone, 3, "read-table")
    instr, tree = PAGES["read-table"]
    entry = next(k for k, e in enumerate(tree) if e.get("editable"))
    assert tree[enc.elem_lookup[entry]]["text"] == "Male"                 # the Gender row's value, not the copy's
    assert (enc.elem_lookup >= 0).sum() == 1                              # fields only
    enc2 = _encode(backbone, 3, "read-table-2")
    _, tree2 = PAGES["read-table-2"]
    got = {tree2[k - 1]["text"]: tree2[v]["text"] for k, v in enumerate(enc2.elem_lookup) if v >= 0}
    assert got == {"Language:": "Russian", "Year of Birth:": "2014"}       # each field its own label's row
    # the training label copies the text from the element the page says it is read from
    step = GuiStep(instr, [], tree, np.zeros((340, 500, 3), np.uint8), Screen(500, 340),
                   GuiAction("type", element=tree[entry]["index"], text="Male"))
    cfg = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True, features=3)
    lab = label(step, enc, cfg)
    assert span_text((lab["label_start"], lab["label_end"]), enc, instr) == "Male"
    assert enc.tree_spans[lab["label_start"]][0] == enc.elem_lookup[entry]


def test_the_point_at_the_named_coordinate_is_read_on_the_axes_even_where_a_tick_is_off_its_line(backbone):
    from embodia.policies.gui.head_context import at_coordinate
    _, tree = PAGES["grid"]

    def named(instruction):
        return [tree[k]["bounds"][:2] for k, hit in enumerate(at_coordinate(tree, instruction)) if hit]
    assert named("Click on the grid coordinate (-2,2).") == [[14, 64]]       # left column, top row
    assert named("Click on the grid coordinate (0,0).") == [[74, 124]]        # its "0" sits off both axes
    assert named("Click on the grid coordinate (1,-1).") == [[104, 154]]
    assert named("Click the button") == []
    enc = _encode(backbone, 3, "grid", "Click on the grid coordinate (2,0).")
    assert [tree[k]["bounds"][:2] for k in np.flatnonzero(enc.elem_feats[:, -3])] == [[134, 124]]


def test_the_row_holding_a_name_the_instruction_names_once_is_flagged_with_its_icons(backbone):
    _, tree = PAGES["inbox"]
    enc = _encode(backbone, 3, "inbox")
    named, inside = enc.elem_feats[:, -2], enc.elem_feats[:, -1]
    assert [tree[k]["text"][:5] for k in np.flatnonzero(named)] == ["Gates"]      # the row, not the copy's "Gates"
    assert [tree[k]["index"] for k in np.flatnonzero(inside)] == [12, 13]          # its trash and star icons
    # a word every row holds names none of them
    rows = [dict(e, text=e["text"] + " email") if e["role"] == "section" else e for e in tree]
    from embodia.policies.gui.head_context import instruction_copy, named_once
    instr = "Open the email"
    assert not any(named_once(rows, instr, instruction_copy(rows, instr)))
