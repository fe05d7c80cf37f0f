"""The safety gate: GUI actions judged risky need a yes before they run; the default is No.

Risk classes: ``send`` (messages, posts, mail; Enter or ctrl+enter in a message field),
``delete`` (delete, remove, erase, uninstall; swipe-to-delete, a drag onto a trash can,
shift+delete; destructive shell commands typed and submitted), ``pay``, ``purchase``,
``install``, ``password`` (typing into a password field), ``system`` (shutdown, reboot,
ctrl+alt+delete) and ``unknown`` (an action naming a UI element that is not on the screen: what
it would do cannot be judged, so it is refused like any risk).

How a label is read (`normalize`): Unicode NFKC, zero-width and other format characters removed,
letters that look Latin but are not (Cyrillic ``е``, Greek ``ο``) folded, ids split at camelCase,
snake_case, dots and slashes, accents dropped; then matched against risky verbs in English,
Spanish, Portuguese, French, German, Italian, Russian, Chinese, Japanese and Korean (`VERBS`).

What an action targets: the clickable element that contains its point decides (a tap on an icon
inside a Send button is a tap on Send), read with the non-clickable labels inside it; gestures are
judged by what they do (a sideways swipe on a row offering delete, a drag onto a bin, a drop onto a
button); `type` targets the focused element, and typed text with a newline is type-and-submit
(each newline presses Enter), judged on its content (``rm -rf ~``) and on the field. Key chords
are normalized whatever their spelling (``shift+delete``, ``("Shift", "Del")``, ``KEYCODE_FORWARD_DEL``).

A device without a UI tree gives the gate only the action itself (keys and typed text are still
judged; a click is not), so on a plain desktop run unattended with that in mind.

Every decision is returned as a dict that the loop records on the step: the class, the evidence,
whether it ran, and who decided (``allow-list``, ``user``, ``default-no``).

>>> from embodia.devices import GuiAction
>>> gate = SafetyGate()
>>> tree = [{"index": 0, "text": "Send", "role": "android.widget.Button", "bounds": [0, 0, 100, 50]}]
>>> d = gate.check(GuiAction("click", element=0), tree=tree, screen=(1000, 1000))
>>> d["risk"], d["allowed"], d["by"]
('send', False, 'default-no')
>>> SafetyGate(allow={"send"}).check(GuiAction("click", element=0), tree=tree, screen=(1000, 1000))["allowed"]
True
>>> classify(GuiAction("type", text="rm -rf ~\\n"))[0], classify(GuiAction("key", keys=("shift+delete",)))[0]
('delete', 'delete')
"""
from __future__ import annotations

import re
import unicodedata
from typing import Callable, Iterable

from embodia.devices import GuiAction

RISK_CLASSES = ("send", "delete", "pay", "purchase", "install", "password", "system", "unknown")



class RiskRefused(RuntimeError):
    """A risky action was not confirmed; the episode ends and the refusal is recorded."""

    def __init__(self, decision: dict):
        self.decision = decision
        super().__init__(f"refused {decision['risk']!r} action ({decision['evidence']}); "
                         f"allow it with --allow {decision['risk']}")


# -- reading labels ---------------------------------------------------------------------------------
# letters from other scripts that render like Latin ones (the common homoglyph attacks)
_CONFUSABLE = str.maketrans({
    **dict(zip("АВЕЅІЈКМНОРСТХУаеѕіјкмнорсухԁԛԝһӏ", "ABESIJKMHOPCTXYaesijkmhopcyxdqwhl", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαεικνορτυχ", "ABEZHIKMNOPTYXaeikvoptux", strict=True)),
    "ı": "i", "ɡ": "g", "ℓ": "l"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")
_SEPARATORS = re.compile(r"[_\-./:#@\\|+=,;()\[\]{}<>\"'`*~!?]+|\s+")


def _strip_format(s: str) -> str:
    # zero-width spaces/joiners, soft hyphens, bidi marks: invisible, so never part of a word
    return "".join(c for c in s if unicodedata.category(c) != "Cf")


def _words(s: str) -> str:
    s = _SEPARATORS.sub(" ", _CAMEL.sub(" ", s))
    return " ".join(s.casefold().split())


def normalize(label: str) -> set[str]:
    """The forms of a label the patterns are matched against: as written (NFKC, invisible characters
    removed, ids split into words, case-folded), with look-alike letters folded to Latin, and
    without accents.

    >>> sorted(normalize("btnSend"))
    ['btn send']
    >>> "send" in normalize("S\\u0435nd") and "send" in normalize("Se\\u200bnd")     # Cyrillic e, zero-width space
    True
    >>> sorted(normalize("Löschen"))
    ['loschen', 'löschen']
    """
    s = _strip_format(unicodedata.normalize("NFKC", str(label)))
    plain, folded = _words(s), _words(s.translate(_CONFUSABLE))
    bare = "".join(c for c in unicodedata.normalize("NFKD", folded) if not unicodedata.combining(c))
    return {plain, folded, _words(bare)}


# risky verbs, by class and language; Latin-script words match whole words of the normalized
# label (accents dropped), the rest as substrings (no spaces between words in CJK)
VERBS = {
    "password": ["password", "passcode", "passwd", "pwd", "pin", "pin code", "contrasena", "senha",
                 "passwort", "kennwort", "mot de passe", "пароль", "密码", "密碼", "パスワード", "暗証番号", "비밀번호"],
    "pay": ["pay", "pay now", "checkout", "check out", "place order", "confirm payment", "transfer money",
            "send money", "submit payment", "make payment", "make a payment", "send payment", "authorize payment",
            "approve payment", "approve transaction", "confirm transaction", "transfer", "wire", "wire money",
            "donate", "donate now", "pagar", "pague", "realizar pedido", "finalizar compra", "bezahlen", "zahlen",
            "jetzt bezahlen", "zur kasse", "payer", "passer la commande", "paga", "оплатить", "заплатить",
            "оплата", "支付", "付款", "结账", "結帳", "お支払い", "支払う", "支払い", "決済", "결제"],
    "purchase": ["buy", "buy now", "purchase", "subscribe", "order", "order now", "add to cart", "book now",
                 "reserve now", "rent now", "upgrade now", "get premium", "confirm purchase", "comprar",
                 "suscribirse", "suscribir", "assinar", "kaufen", "jetzt kaufen", "abonnieren", "bestellen",
                 "acheter", "abonner", "s abonner", "commander", "acquista", "купить", "подписаться",
                 "购买", "購買", "订阅", "訂閱", "購入", "買う", "구매"],
    # before install: "アンインストール" holds "インストール"
    "delete": ["delete", "del", "dlt", "remove", "erase", "uninstall", "discard", "trash", "move to trash",
               "empty trash", "empty bin", "empty recycle bin", "clear all", "clear history", "clear data", "wipe",
               # closing without saving throws the unsaved work away (GTK/Qt "Don't Save" dialogs)
               "don t save", "dont save", "do not save", "without saving", "nicht speichern", "no guardar",
               "ne pas enregistrer", "不保存", "保存しない",
               "factory reset", "reset to factory", "factory data reset", "format", "format card", "rm",
               "purge", "destroy", "eliminar", "borrar", "suprimir", "desinstalar", "excluir", "apagar",
               "remover", "loschen", "loeschen", "entfernen", "deinstallieren", "supprimer", "effacer",
               "desinstaller", "elimina", "cancella", "удалить", "удалите", "удаление", "стереть",
               "删除", "刪除", "删掉", "移除", "卸载", "卸載", "清空", "削除", "消去", "アンインストール", "삭제"],
    "install": ["install", "download app", "get app", "update app", "instalar", "installieren", "installer",
                "installa", "установить", "安装", "安裝", "インストール", "설치"],
    "send": ["send", "snd", "send now", "post", "tweet", "publish", "reply all", "share now", "enviar",
             "envia", "envie", "publicar", "senden", "absenden", "abschicken", "versenden", "verschicken",
             "posten", "veroffentlichen", "envoyer", "publier", "invia", "pubblica", "отправить",
             "отправь", "послать", "опубликовать", "发送", "發送", "发布", "發佈", "发表", "送出",
             "送信", "投稿", "送る", "보내기", "전송"],
}
_ORDER = ("password", "pay", "purchase", "delete", "install", "send")


def _pattern(words: list[str]) -> re.Pattern:
    latin = [w for w in words if re.fullmatch(r"[a-z ]+", w)]
    other = [w for w in words if w not in latin]
    alts = [r"\b(?:" + "|".join(re.escape(w) for w in sorted(latin, key=len, reverse=True)) + r")\b"]
    if other:
        alts.append("|".join(re.escape(w) for w in sorted(other, key=len, reverse=True)))
    return re.compile("|".join(alts))


_PATTERNS = {risk: _pattern(VERBS[risk]) for risk in _ORDER}
_BIN = _pattern(["trash", "trash can", "bin", "recycle bin", "wastebasket", "garbage", "papelera", "basura",
                 "papierkorb", "mulleimer", "muelleimer", "corbeille", "poubelle", "lixeira", "lixo", "cestino",
                 "корзина", "垃圾桶", "回收站", "ゴミ箱", "휴지통"])
_MESSAGE_FIELD = _pattern(["message", "messages", "msg", "chat", "reply", "comment", "compose", "sms", "tweet",
                           "post", "mensaje", "mensagem", "nachricht", "kommentar", "commentaire", "messaggio",
                           "сообщение", "消息", "信息", "留言", "评论", "メッセージ", "コメント", "메시지"])
_COMMAND_FIELD = _pattern(["terminal", "command", "cmd", "shell", "console", "bash", "zsh", "powershell",
                           "xterm", "konsole", "command prompt", "run"])

# what a submitted command does; matched on the typed text (or the field's text on Enter)
_COMMANDS = [
    ("delete", re.compile(r"(^|[;&|`(]\s*|\bsudo\s+)(rm|rmdir|shred|wipefs|mkfs(\.\w+)?|fdisk|diskpart|"
                          r"del|erase|rd|format|remove-item)\b|\bdd\b[^\n]*\bof=|>\s*/dev/(sd|nvme|hd|disk)|"
                          r"\bdrop\s+(table|database)\b|\btruncate\s+table\b|\bgit\s+(reset\s+--hard|clean\s+-\w*f|"
                          r"push\b[^\n]*(--force|\s-f\b))", re.I | re.M)),
    ("system", re.compile(r"(^|[;&|`(]\s*|\bsudo\s+)(shutdown|reboot|halt|poweroff|init\s+[06]|kill|killall|"
                          r"pkill|stop-computer|restart-computer|chmod\s+-r|chown\s+-r)\b|:\(\)\s*\{", re.I | re.M)),
    ("install", re.compile(r"\b(curl|wget)\b[^\n]*\|\s*(sudo\s+)?(ba|z)?sh\b|(^|[;&|]\s*|\bsudo\s+)"
                           r"(apt|apt-get|yum|dnf|pip3?|npm|brew|choco|winget)\s+install\b", re.I | re.M)),
]


# a verb followed by one of these names a place or a record, not the act ("Post office",
# "Install guide", "Order history", "发送记录", "送信済み")
_NOT_ACT = re.compile(r"\s*(office|guide|history|settings?|options?|info|information|rules|in|logs?|records?|"
                      r"status|details|methods?|list|folder|date|time|address|queue|"
                      r"记录|記錄|历史|歷史|设置|設定|済み|済|履歴|記録|中)\b", re.I)
_ABBREV = {"del", "dlt", "rm", "snd", "pwd"}
_ID_WORDS = {"btn", "button", "icon", "ic", "item", "action", "menu", "fab", "key"}


def _acts(form: str, m: re.Match) -> bool:
    """Whether a match in ``form`` reads as the act itself, not a noun phrase or a name."""
    rest = form[m.end():]
    if " " not in m.group(0) and _NOT_ACT.match(rest):     # a phrase ("reset to factory") is an act
        return False
    if m.group(0) in _ABBREV:        # "del" in "btnDel", not in "Del Mar hotel"
        nxt = rest.split()[:1]
        return not nxt or nxt[0] in _ID_WORDS
    return True


def _match(patterns, text: str):
    """The first (class, matched words) whose pattern matches a form of ``text`` as an act, else None."""
    forms = normalize(text) if text else set()
    for risk, pat in patterns:
        for f in sorted(forms):
            for m in pat.finditer(f):
                if _acts(f, m):
                    return risk, m.group(0)
    return None


def _command_risk(text: str):
    text = unicodedata.normalize("NFKC", _strip_format(text or "")).translate(_CONFUSABLE)
    for risk, pat in _COMMANDS:
        m = pat.search(text)
        if m:
            return risk, m.group(0).strip()
    return None


# -- key chords -------------------------------------------------------------------------------------
_KEY_ALIASES = {"control": "ctrl", "ctl": "ctrl", "strg": "ctrl", "del": "delete", "forward_del": "delete",
                "forward_delete": "delete", "forwarddel": "delete", "supr": "delete", "entf": "delete",
                "return": "enter", "numpad_enter": "enter", "kp_enter": "enter", "numpadenter": "enter",
                "cmd": "meta", "command": "meta", "win": "meta", "super": "meta", "windows": "meta",
                "option": "alt", "opt": "alt", "altgr": "alt", "back_space": "backspace", "bksp": "backspace"}


def chord(keys: Iterable[str]) -> frozenset[str]:
    """The set of keys pressed together, whatever the spelling.

    >>> sorted(chord(["shift+delete"])) == sorted(chord(["KEYCODE_SHIFT_LEFT", "Del"])) == ["delete", "shift"]
    True
    """
    out = set()
    for k in keys:
        k = unicodedata.normalize("NFKC", _strip_format(str(k))).strip().lower()
        parts = [k] if len(k) == 1 else [p for p in re.split(r"\s*[+\s]\s*|(?<=\w)-(?=\w)", k) if p]
        for p in parts:
            p = re.sub(r"^keycode_", "", p)
            p = re.sub(r"^(ctrl|control|shift|alt|meta|cmd|command|super|win)_?(left|right)$", r"\1", p)
            out.add(_KEY_ALIASES.get(p, p))
    return frozenset(out)


_CHORDS = [({"ctrl", "alt", "delete"}, "system", "ctrl+alt+delete"),
           ({"shift", "delete"}, "delete", "shift+delete (permanent delete)"),
           ({"meta", "backspace"}, "delete", "cmd+backspace (move to trash)"),
           ({"meta", "delete"}, "delete", "cmd+delete (move to trash)"),
           ({"ctrl", "enter"}, "send", "ctrl+enter (submit)"),
           ({"meta", "enter"}, "send", "cmd+enter (submit)")]


# -- what an action targets -------------------------------------------------------------------------
def _label(e: dict) -> str:
    return " ".join(str(e.get(k) or "") for k in ("text", "desc", "id", "hint") if e.get(k))


def _screen_size(screen):
    if screen is None:
        return None
    if hasattr(screen, "width"):
        return screen.width, screen.height
    return tuple(screen)


def _area(e):
    b = e["bounds"]
    return max(0, b[2] - b[0]) * max(0, b[3] - b[1])


def _inside(e, outer):
    a, b = e.get("bounds"), outer["bounds"]
    return e is not outer and a and a[0] >= b[0] and a[1] >= b[1] and a[2] <= b[2] and a[3] <= b[3]


def _pixel(point, screen):
    size = _screen_size(screen)
    if point is None or not size:
        return None
    return point[0] * size[0] / 1000.0, point[1] * size[1] / 1000.0


def _hits(tree, xy):
    if xy is None:
        return []
    x, y = xy
    hits = [e for e in tree if isinstance(e.get("bounds"), (list, tuple)) and len(e["bounds"]) == 4
            and e["bounds"][0] <= x < e["bounds"][2] and e["bounds"][1] <= y < e["bounds"][3]]
    return sorted(hits, key=_area)


class _Unresolved(Exception):
    pass


def _element(action, tree):
    e = next((e for e in tree or () if e.get("index") == action.element), None)
    if e is None:
        raise _Unresolved(f"element {action.element} is not on the screen")
    return e


def _point_of(action, tree, screen):
    """The pixel an action's point lands on (an element reference: its centre)."""
    if action.element is not None:
        b = _element(action, tree).get("bounds")
        return ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) if b else None
    return _pixel(action.point, screen)


def target_element(action: GuiAction, tree: list | None, screen) -> dict | None:
    """The UI-tree element an action acts on: the smallest clickable element containing its point
    (a named element: its centre), else the smallest labelled element there, else for `type` and
    keys the focused element."""
    if not tree:
        return None
    try:
        xy = _point_of(action, tree, screen)
    except _Unresolved:
        return None
    hits = _hits(tree, xy)
    if action.element is not None and not hits:
        return _element(action, tree)
    clickable = [e for e in hits if e.get("clickable")]
    if clickable:
        return clickable[0]
    labelled = [e for e in hits if _label(e)] or hits
    if labelled:
        return labelled[0]
    if action.type in ("type", "key", "system_button"):
        return next((e for e in tree if e.get("focused")), None)
    return None


def _target_text(action, tree, screen) -> str:
    """What the target says: its own label, the non-clickable labels inside it (a button's text
    and icon), and the labels under the point up to it."""
    el = target_element(action, tree, screen)
    if el is None:
        return ""
    parts = [_label(el)]
    if el.get("clickable") and el.get("bounds"):
        parts += [_label(e) for e in tree if not e.get("clickable") and _inside(e, el) and _label(e)]
    if action.element is not None and action.element != el.get("index"):
        parts.append(_label(_element(action, tree)))
    return " | ".join(p for p in parts if p)


def _focused(tree):
    return next((e for e in tree or () if e.get("focused")), None)


def _field_kind(e) -> str | None:
    """"message" or "command" for a text field where Enter submits, else None."""
    if e is None:
        return None
    text = " ".join([_label(e), str(e.get("role") or "")])
    if _match([("command", _COMMAND_FIELD)], text):
        return "command"
    if _match([("message", _MESSAGE_FIELD)], text):
        return "message"
    return None


def _submit(field, content: str, how: str):
    """The risk of submitting ``content`` (typed text, or the field's text on Enter) in ``field``."""
    c = _command_risk(content)
    if c:
        return c[0], f"{how} runs {c[1]!r}"
    kind = _field_kind(field)
    if kind == "message":
        return "send", f"{how} in message field {_label(field)!r}"
    return None, ""


def _labels_risk(text: str, patterns=None):
    m = _match([(r, _PATTERNS[r]) for r in (patterns or _ORDER) if r != "password"], text)
    return m


def _gesture(action, tree, screen):
    """Swipes and drags, judged by what they do."""
    start, end = _pixel(action.point, screen), _pixel(action.end, screen)
    size = _screen_size(screen)
    if action.type == "drag" and end is not None:
        hits = [e for e in _hits(tree, end) if not size or _area(e) < 0.5 * size[0] * size[1]]
        text = " | ".join(_label(e) for e in hits if _label(e))
        if _match([("delete", _BIN)], text):
            return "delete", f"drag onto {text!r}"
        m = _labels_risk(text)
        if m:
            return m[0], f"drop onto {text!r} ({m[1]!r})"
    sideways = (action.type in ("swipe", "drag") and start and end and abs(end[0] - start[0]) > abs(end[1] - start[1])) \
        or (action.type == "scroll" and action.direction in ("left", "right"))
    if sideways:
        hits = _hits(tree, start)
        rows = [e for e in hits if not size or _area(e) < 0.5 * size[0] * size[1]]
        if rows:
            # the row is the clickable element under the finger (list rows are), else the largest
            row = next((e for e in rows if e.get("clickable")), rows[-1])
            text = " | ".join(_label(e) for e in [row] + [e for e in tree if _inside(e, row)] if _label(e))
            m = _labels_risk(text, ("delete",))
            if m:
                return "delete", f"{action.type} sideways on a row offering {m[1]!r} ({text!r})"
    return None, ""


def classify(action: GuiAction, tree: list | None = None, screen=None) -> tuple[str | None, str]:
    """(risk class or None, evidence in words)."""
    t = action.type
    if t in ("wait", "answer", "terminate", "open_app"):
        return None, ""
    try:
        if action.element is not None:
            if not tree:
                raise _Unresolved(f"element {action.element} named but the device gave no UI tree")
            _element(action, tree)
        if t in ("swipe", "drag", "scroll"):
            return _gesture(action, tree or [], screen) if tree else (None, "")
        if t == "type":
            el = target_element(action, tree, screen) if action.element is not None or action.point is not None \
                else _focused(tree)
            el = el or _focused(tree)
            if el is not None and (el.get("password") or _match([("password", _PATTERNS["password"])], _label(el))):
                return "password", f"typing into password field {_label(el)!r}"
            if "\n" in action.text or "\r" in action.text:
                return _submit(el, action.text, "typing with a newline (type and submit)")
            return None, ""
        if t == "key" or (t == "system_button" and action.button == "enter"):
            keys = chord(action.keys) if t == "key" else frozenset({"enter"})
            for need, risk, why in _CHORDS:
                if need <= keys and risk:
                    return risk, why
            if "enter" in keys:
                field = _focused(tree)
                return _submit(field, str((field or {}).get("text") or ""), "Enter")
            return None, ""
        if t in ("click", "double_click", "long_press", "right_click") and tree:
            text = _target_text(action, tree, screen)
            m = _labels_risk(text)
            if m:
                return m[0], f"{t} on element {text.strip()!r} ({m[1]!r})"
    except _Unresolved as e:
        return "unknown", f"unresolvable target: {e}"
    return None, ""


class SafetyGate:
    """``check(action, tree=, screen=)`` -> decision dict; ``allow`` is the unattended allow-list
    (risk classes, or ``"all"``); ``confirm(decision) -> bool`` asks a person (None: nobody to ask,
    the answer is No)."""

    def __init__(self, allow: Iterable[str] = (), confirm: Callable[[dict], bool] | None = None):
        allow = {a.strip().lower() for a in allow if a and a.strip()}
        unknown = allow - set(RISK_CLASSES) - {"all"}
        if unknown:
            raise ValueError(f"unknown risk class(es) {sorted(unknown)}; known: {', '.join(RISK_CLASSES)}, all")
        self.allow = set(RISK_CLASSES) if "all" in allow else allow
        self.confirm = confirm
        self.decisions: list[dict] = []

    def check(self, action: GuiAction, *, tree: list | None = None, screen=None) -> dict:
        risk, evidence = classify(action, tree, screen)
        if risk is None:
            return {"risk": None, "allowed": True}
        d = {"risk": risk, "evidence": evidence, "action": action.to_dict()}
        if risk in self.allow:
            d.update(allowed=True, by="allow-list")
        elif self.confirm is not None:
            d.update(allowed=bool(self.confirm(d)), by="user")
        else:
            d.update(allowed=False, by="default-no")
        self.decisions.append(d)
        return d


def default_gate(device, allow=(), confirm=None) -> SafetyGate:
    """The gate a run gets: on a device declaring the "sandbox" capability (a simulator, where
    nothing real is sent, paid or deleted) every class is allowed, still judged and recorded;
    elsewhere ``allow`` and ``confirm`` decide."""
    if "sandbox" in getattr(device, "capabilities", ()):
        return SafetyGate(allow=("all",))
    return SafetyGate(allow, confirm=confirm)


def console_confirm(decision: dict) -> bool:
    """Ask on the terminal; anything but y/yes is No (also EOF and Ctrl-C)."""
    try:
        ans = input(f"\nRisky action ({decision['risk']}): {decision['evidence']}\n"
                    f"  {decision['action']}\nExecute it? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        return False
    return ans.strip().lower() in ("y", "yes")
