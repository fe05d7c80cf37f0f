"""How the safety gate (`embodia.agent.loop.safety`) reads words: labels normalized against
look-alike letters, invisible characters and id spellings; the risky verbs by class and language;
when a verb names the act and when only a place, a record or a name ("Post office", "the Trash",
"Undo delete"); and what a submitted shell or SQL command would do.

>>> sorted(normalize("btnSend"))
['btn send']
>>> match([(r, PATTERNS[r]) for r in ORDER], "Undo delete"), match([("delete", PATTERNS["delete"])], "Delete 3 items")
(None, ('delete', 'delete'))
>>> command_risk("git push origin +main\\n"), command_risk("grep -r 'DELETE FROM' src/\\n")
(('delete', 'git push origin +main'), None)
"""
from __future__ import annotations

import re
import unicodedata

# letters from other scripts that render like Latin ones (the common homoglyph attacks)
CONFUSABLE = str.maketrans({
    **dict(zip("АВЕЅІЈКМНОРСТХУаеѕіјкмнорсухԁԛԝһӏ", "ABESIJKMHOPCTXYaesijkmhopcyxdqwhl", strict=True)),
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαεικνορτυχ", "ABEZHIKMNOPTYXaeikvoptux", strict=True)),
    "ı": "i", "ɡ": "g", "ℓ": "l"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")
_SEPARATORS = re.compile(r"[_\-./:#@\\|+=,;()\[\]{}<>\"'`*~!?]+|\s+")


def strip_format(s: str) -> str:
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
    s = strip_format(unicodedata.normalize("NFKC", str(label)))
    plain, folded = _words(s), _words(s.translate(CONFUSABLE))
    bare = "".join(c for c in unicodedata.normalize("NFKD", folded) if not unicodedata.combining(c))
    return {plain, folded, _words(bare)}


# risky verbs, by class and language; Latin-script words match whole words of the normalized
# label (accents dropped), the rest as substrings (no spaces between words in CJK)
VERBS = {
    "password": ["password", "passcode", "passwd", "pwd", "pin", "pin code", "contrasena", "senha",
                 "passwort", "kennwort", "mot de passe", "пароль", "密码", "密碼", "パスワード", "暗証番号", "비밀번호",
                 # secrets that are not called passwords: card details, wallet keys
                 "passphrase", "card number", "credit card number", "debit card number", "cardnumber", "card no",
                 "cc number", "cvc", "cvv", "cvc2", "cvv2", "csc", "security code", "card security code",
                 "card verification", "numero de tarjeta", "kartennummer", "numero de carte", "numero do cartao",
                 "numero della carta", "seed phrase", "recovery phrase", "mnemonic", "private key", "secret key",
                 # keys to accounts and services
                 "secret", "access key", "secret access key", "api key", "api secret", "client secret",
                 "auth token", "access token", "app password"],
    "pay": ["pay", "pay now", "checkout", "check out", "place order", "place your order", "complete payment", "confirm payment", "transfer money",
            "send money", "submit payment", "make payment", "make a payment", "send payment", "authorize payment",
            "approve payment", "approve transaction", "confirm transaction", "transfer", "wire", "wire money",
            "donate", "donate now", "transferencia", "transferir", "uberweisen", "virement",
            "bonifico", "tip", "add tip", "top up", "topup", "add funds", "add money", "withdraw", "cash out",
            "pagar", "pague", "realizar pedido", "finalizar compra", "bezahlen", "zahlen",
            "jetzt bezahlen", "zur kasse", "payer", "passer la commande", "paga", "оплатить", "заплатить",
            "оплата", "支付", "付款", "结账", "結帳", "お支払い", "支払う", "支払い", "決済", "결제"],
    "purchase": ["buy", "buy now", "purchase", "subscribe", "order", "order now", "add to cart", "book now",
                 "reserve now", "rent now", "upgrade now", "get premium", "confirm purchase", "confirm booking",
                 "start subscription", "upgrade", "bid", "place bid", "bid now", "pre order", "preorder", "renew",
                 "renew now", "start free trial", "start trial", "start my free trial", "try free", "try it free",
                 "go premium", "go pro", "get pro", "pledge", "back this project", "comprar", "оформить заказ",
                 "提交订单", "立即购买", "下单",
                 "suscribirse", "suscribir", "assinar", "kaufen", "jetzt kaufen", "abonnieren", "bestellen",
                 "acheter", "abonner", "s abonner", "commander", "acquista", "купить", "подписаться",
                 "购买", "購買", "订阅", "訂閱", "購入", "買う", "구매"],
    # before install: "アンインストール" holds "インストール"
    "delete": ["delete", "del", "dlt", "remove", "erase", "uninstall", "discard", "trash", "move to trash", "bin",
               # account actions: gone for good, or gone for the other side ("Unsend")
               "deactivate", "unsend", "close account", "close my account", "close your account",
               "terminate account", "recall message", "recall this message", "\U0001f5d1",
               # gone for good under other names: shredding, wiping, revoking, forgetting, leaving
               "shred", "shred files", "securely erase", "secure erase", "delete forever", "revoke", "forget",
               "unpublish", "unpair", "unregister", "unlink", "disconnect account", "kick", "ban",
               "leave group", "leave the group", "leave channel", "leave conversation", "leave team",
               "leave workspace", "leave server", "exit group", "reset all", "reset settings", "reset all settings",
               "reset to defaults", "reset to default", "reset device", "reset phone", "reset network settings",
               "erase all content", "erase all data", "reset everything", "terminate", "factory restore",
               "restore factory settings", "restore factory defaults", "restore to factory", "drop table",
               "drop database", "drop collection", "drop index", "drop schema", "empty junk", "empty spam",
               "empty folder", "empty deleted items", "retirer", "enlever", "vider la corbeille", "vaciar papelera",
               "svuota", "svuota cestino", "papierkorb leeren", "очистить корзину",
               "empty trash", "empty bin", "empty recycle bin", "empty the trash", "empty the bin", "clear chat",
               "clear conversation", "clear messages", "clear storage", "clear all", "clear history", "clear data", "wipe",
               # closing without saving throws the unsaved work away (GTK/Qt "Don't Save" dialogs)
               "don t save", "dont save", "do not save", "without saving", "nicht speichern", "no guardar",
               "ne pas enregistrer", "不保存", "保存しない",
               "factory reset", "reset to factory", "factory data reset", "format", "format card", "rm",
               "purge", "destroy", "eliminar", "borrar", "suprimir", "desinstalar", "excluir", "apagar",
               "remover", "loschen", "loeschen", "entfernen", "deinstallieren", "supprimer", "effacer",
               "desinstaller", "elimina", "cancella", "удалить", "удалите", "удаление", "стереть",
               "删除", "刪除", "删掉", "移除", "卸载", "卸載", "清空", "削除", "消去", "アンインストール", "삭제"],
    "install": ["install", "download app", "get app", "update app", "add extension", "add to chrome",
                "add to firefox", "add to edge", "add to browser", "add app", "install anyway", "sideload",
                "instalar", "installieren", "installer", "installa", "установить", "安装", "安裝", "インストール", "설치"],
    "send": ["send", "snd", "send now", "post", "tweet", "publish", "reply all", "share now", "forward message",
             "forward email", "forward to", "broadcast", "repost", "retweet", "send invite", "send invites",
             "submit application", "submit review", "submit request", "submit ticket", "submit claim",
             "submit report", "comment", "post comment",
             "enviar",
             "envia", "envie", "publicar", "senden", "absenden", "abschicken", "versenden", "verschicken",
             "posten", "veroffentlichen", "envoyer", "publier", "invia", "pubblica", "отправить",
             "отправь", "послать", "опубликовать", "发送", "發送", "发布", "發佈", "发表", "送出",
             "送信", "投稿", "送る", "보내기", "전송"],
    # "power_settings_new" / "restart_alt": Material icon names shown as the button's text
    "system": ["shut down", "shutdown", "power off", "poweroff", "restart", "reboot", "restart now",
               "force stop", "force quit", "end task", "end process", "kill process", "suspend", "hibernate",
               "power settings new", "restart alt", "\u23fb", "\u23fc", "\u23fd", "apagar equipo",
               "herunterfahren", "neu starten", "eteindre", "redemarrer", "выключить", "перезагрузить",
               "关机", "重启", "シャットダウン", "再起動", "전원 끄기", "다시 시작"],
}
ORDER = ("password", "pay", "purchase", "delete", "install", "send", "system")
# a press that changes a password or PIN (a secret is replaced: class "password"); "Forgot password?"
# asks, and a field named "New password" is typed into, not pressed
_SECRET = r"(password|passcode|passphrase|pin|pin code|passwort|kennwort|contrasena|senha|mot de passe|пароль)"
SECURITY_OFF = re.compile(r"\b(turn off|switch off|disable|remove|deactivate|stop using)\s+((your|the)\s+)*"
                          r"(2 step|two step|2 factor|two factor|2fa|mfa|multi factor|screen lock|passkeys?|"
                          r"security keys?|login verification|sign in verification)\b")
# switches that open the device to what it would refuse: unknown apps, debugging from a computer
INSTALL_TOGGLE = re.compile(r"\b(allow from this source|unknown sources|install unknown apps|allow app installs|"
                            r"usb debugging|wireless debugging|allow installation)\b")
CREDENTIAL = re.compile(r"\b(update|change|reset|set|set up|setup|save|create|choose)\s+"
                        r"((your|my|the|a|new|account)\s+)*" + _SECRET + r"\b|\b" + _SECRET
                        + r"\s+(andern|aktualisieren|zurucksetzen|speichern|update|change|reset)\b|"
                        r"\b(cambiar|actualizar|restablecer|changer|modifier|reinitialiser|alterar|mudar|redefinir|"
                        r"modifica|cambia|reimposta|изменить|сменить|сбросить)\s+((la|le|votre|a|tu|su|il)\s+)*"
                        + _SECRET
                        + r"\b|(修改|更改|重置|设置)(密码|密碼)|パスワード(を)?(変更|リセット)|비밀번호 (변경|재설정)")


def pattern(words: list[str]) -> re.Pattern:
    latin = [w for w in words if re.fullmatch(r"[a-z ]+", w)]
    other = [w for w in words if w not in latin]
    alts = [r"\b(?:" + "|".join(re.escape(w) for w in sorted(latin, key=len, reverse=True)) + r")\b"]
    if other:
        alts.append("|".join(re.escape(w) for w in sorted(other, key=len, reverse=True)))
    return re.compile("|".join(alts))


PATTERNS = {risk: pattern(VERBS[risk]) for risk in ORDER}


def _inflect(phrase: str) -> list[str]:
    """A verb phrase as a sentence uses it: "delete" -> deletes, deleted, deleting, deletion;
    "power off" -> powering off (its first word inflected)."""
    first, _, rest = phrase.partition(" ")
    if not re.fullmatch(r"[a-z]{3,}", first):
        return [phrase]
    stem = first[:-1] if first.endswith("e") else first
    forms = {first, first + "s", stem + "ed", stem + "ing", stem + "ion", first + "d" if first.endswith("e") else first}
    return [f"{f} {rest}".strip() for f in sorted(forms)]


# the verbs as a dialog's sentence says them ("All data will be erased", "Powering off will end...")
_PARTICIPLES = {
    "delete": ["geloscht", "entfernt", "deinstalliert", "supprime", "supprimes", "supprimee", "supprimees", "efface",
               "effaces", "eliminado", "eliminados", "eliminada", "eliminadas", "borrado", "borrados", "excluido",
               "excluidos", "apagado", "apagados", "eliminato", "eliminati", "cancellato", "cancellati", "удален",
               "удалена", "удалено", "удалены"],
    "send": ["gesendet", "verschickt", "envoye", "envoyee", "enviado", "enviada", "inviato", "отправлено"],
    "pay": ["bezahlt", "uberwiesen", "paye", "pagado", "pago", "pagato", "оплачено"],
    "install": ["installiert", "installe", "instalado", "installato", "установлено"],
}
SENTENCE_PATTERNS = {risk: pattern(sorted({f for w in VERBS[risk] for f in _inflect(w)}
                                          | set(_PARTICIPLES.get(risk, [])))) for risk in ORDER}
BIN = pattern(["trash", "trash can", "bin", "recycle bin", "wastebasket", "garbage", "papelera", "basura",
                 "papierkorb", "mulleimer", "muelleimer", "corbeille", "poubelle", "lixeira", "lixo", "cestino",
                 "корзина", "垃圾桶", "回收站", "ゴミ箱", "휴지통"])
MESSAGE_FIELD = pattern(["message", "messages", "msg", "chat", "reply", "comment", "compose", "sms", "tweet",
                          "write something", "say something", "what s on your mind", "start a post",
                           "post", "mensaje", "mensagem", "nachricht", "kommentar", "commentaire", "messaggio",
                           "сообщение", "消息", "信息", "留言", "评论", "メッセージ", "コメント", "메시지"])
COMMAND_FIELD = pattern(["terminal", "command", "cmd", "shell", "console", "bash", "zsh", "powershell",
                           "xterm", "konsole", "command prompt", "run"])
# a field whose Enter looks something up, never sends or runs it (checked before message and
# secret fields: "Search messages", "Search passwords")
SEARCH_FIELD = pattern(["search", "find", "filter", "look up", "lookup", "buscar", "suchen", "rechercher",
                          "cerca", "pesquisar", "поиск", "搜索", "検索", "검색"])

# what a submitted command does; matched on the typed text (or, on Enter, the command line a
# terminal shows). A command starts a line, follows ; & | ` ( or sudo, or is a -c/-e argument
# (``psql -c 'DELETE FROM t'``), so that ``grep 'DELETE FROM'`` or ``man shutdown`` run nothing.
_START = r"(^|[;&|`(]\s*|\bsudo\s+)"
_SQL_START = r"(^|;\s*|\s(-c|-e|--eval|--command|--execute)\s+[\"']?)\s*"
_COMMANDS = [
    # (a leading backslash runs the command past any alias: \\rm)
    ("delete", re.compile(_START + r"\\?(rm|rmdir|shred|wipefs|mkfs(\.\w+)?|fdisk|diskpart|unlink|truncate|"
                          r"del|erase|rd|format|remove-item|clear-recyclebin)\b|\bdd\b[^\n]*\bof=|>\s*/dev/(sd|nvme|hd|disk)|"
                          r"\bdrop\s+(table|database)\b|\btruncate\s+table\b|\bgit\s+(reset\s+--hard|clean\s+-\w*f|"
                          r"push\b[^\n]*(--force|\s-f\b|--delete\b|\s-d\b|--mirror\b|\s\+\S+|\s:\S+)|"
                          r"checkout\s+(--\s+)?\.(\s|$)|restore\s+(-\S+\s+)*\.(\s|$)|stash\s+(clear|drop)\b|branch\s+-D\b)|"
                          r"\bfind\b[^\n]*\s-(delete\b|exec(dir)?\s+(sudo\s+)?(rm|shred|unlink)\b)|" + _SQL_START +
                          r"(delete\s+from|truncate)\b|\bdrop\s+column\b|\bxargs\s+(-\S+\s+)*(sudo\s+)?(rm|shred)\b|"
                          r"\brsync\b[^\n]*\s--delete|\bpm\s+(uninstall|clear)\b|\bcrontab\s+-r\b|\bmv\b[^\n]*\s/dev/null\b|^\s*:?\s*>\s*[^\s>&]|"
                          r"\bdocker\s+((system|volume|image|container|network|builder)\s+prune|rm|rmi|volume\s+rm)\b|"
                          r"\bkubectl\s+delete\b|\bterraform\s+destroy\b|\baws\s+s3\s+(rm|rb)\b|\bgh\s+repo\s+delete\b|"
                          r"\bredis-cli\b[^\n]*\bflush(all|db)\b|\bdropDatabase\s*\(|\bpacman\s+-R|" + _START +
                          r"(apt|apt-get|yum|dnf|zypper|snap)\s+(remove|purge|erase)\b|"
                          r"\b(pip3?|npm|brew|flatpak|choco|winget|gem|cargo)\s+(uninstall|remove)\b", re.I | re.M)),
    ("system", re.compile(_START + r"(shutdown|reboot|halt|poweroff|init\s+[06]|kill|killall|"
                          r"pkill|stop-computer|restart-computer|chmod\s+-r|chown\s+-r)\b|:\(\)\s*\{|"
                          r"\b(systemctl|loginctl)\s+(poweroff|reboot|halt|kexec|soft-reboot)\b|\btelinit\s+[06]\b", re.I | re.M)),
    ("install", re.compile(r"\b(curl|wget)\b[^\n]*\|\s*(sudo\s+)?(ba|z)?sh\b|(^|[;&|]\s*|\bsudo\s+)"
                           r"(apt|apt-get|yum|dnf|pip3?|npm|brew|choco|winget|snap|flatpak|adb)\s+install\b|"
                           r"\b(dpkg\s+(-\S+\s+)*(-i|--install)|rpm\s+(-\S+\s+)*-[a-z]*[iU])\b", re.I | re.M)),
    ("password", re.compile(_START + r"(passwd|chpasswd|usermod\s+(-\S+\s+)*-p)\b", re.I | re.M)),
]
# a command asked only for its help, its version or a dry run does nothing
_HARMLESS_RUN = re.compile(r"\s(--help|--version|--dry-run)(\s|$)")


# a verb followed by one of these names a place or a record, not the act ("Post office",
# "Install guide", "Order history", "发送记录", "送信済み"), or is the subject of a sentence
# ("Trash is empty", "Uninstall complete")
_NOT_ACT = re.compile(r"\s*(office|guide|history|settings?|options?|info|information|rules|in|logs?|records?|"
                      r"status|details|methods?|list|folder|date|time|address|queue|by|of|summary|total|number|"
                      r"no|id|frame|confirmation|tracking|placed|received|complete|completed|finished|failed|"
                      r"successful|is|was|has|have|are|were|or|later|tomorrow|tonight|"
                      r"记录|記錄|历史|歷史|设置|設定|済み|済|履歴|記録|中)\b", re.I)
# a word before the verb that undoes or names it: "Undo delete", "Cancel order", "Sort order", "File transfer"
_UNDOES = {"undo", "cancel", "restore", "recover", "sort", "file", "data", "custom"}
# and one that makes a verb a noun ("the Trash", "from the bin", "your order"); not for field
# names, where "Type a message" is still a message field
_ARTICLES = {"your", "the", "a", "an", "from", "in", "into"}
# words after one verb that make it a noun ("Pay slips", "Pin title", "Post code", "Transfer files")
_NOUN_AFTER = {"pay": re.compile(r"\s*(slips?|stubs?|period|rate|grade|scale|day)\b"),
               "pin": re.compile(r"\s*(title|name|description|board|notes?|chat|message|location|it|to)\b"),
               "post": re.compile(r"\s*(code|malone)\b"),
               "send": re.compile(r"\s*(feedback|us feedback)\b"),
               "transfer": re.compile(r"\s*(files?|photos?|data|speed|mode|progress)\b"),
               "order": re.compile(r"\s*\d"),                                        # "Order #1234"
               # formatting text is no loss; formatting storage is
               "format": re.compile(r"(?!\s*($|(the\s+)?(disk|drive|card|sd|usb|volume|partition|device|storage|"
                                    r"phone|memory|[a-z])\b))")}
# what a remove/clear acts on when nothing is lost: the view, the selection, a list of picks
_CLEARS = {"remove", "clear all", "delete", "erase"}
_HARMLESS_OBJECT = re.compile(r"\s*(all\s+)?(filters?|tags?|highlights?|formatting|format|background|selection|"
                              r"sort|from\s+(the\s+)?(queue|cart|basket|favou?rites|playlist|wishlist|watchlist))\b")
_ABBREV = {"del", "dlt", "rm", "snd", "pwd"}
_ID_WORDS = {"btn", "button", "icon", "ic", "item", "action", "menu", "fab", "key"}


def _acts(form: str, m: re.Match, verbs: bool = True) -> bool:
    """Whether a match in ``form`` reads as the act itself, not a noun phrase or a name
    (``verbs=False``: a word that names a kind of field or place, where articles do not count)."""
    word, rest = m.group(0), form[m.end():]
    before = form[:m.start()].split()[-1:]
    if " " not in word:              # a phrase ("reset to factory") is an act
        if _NOT_ACT.match(rest) or (word in _NOUN_AFTER and _NOUN_AFTER[word].match(rest)):
            return False
        if before and (before[0] in _UNDOES or (verbs and before[0] in _ARTICLES)):
            return False
    if form[max(0, m.start() - 1):m.start()] in ("已", "被"):     # "已发送": already sent
        return False
    if word in _CLEARS and _HARMLESS_OBJECT.match(rest):
        return False
    if word in _ABBREV:        # "del" in "btnDel", not in "Del Mar hotel"
        nxt = rest.split()[:1]
        return not nxt or nxt[0] in _ID_WORDS
    return True


def match(patterns, text: str, verbs: bool = True):
    """The first (class, matched words) whose pattern matches a form of ``text`` as an act, else
    None (``verbs=False``: kinds of fields and places, see `_acts`)."""
    forms = normalize(text) if text else set()
    for risk, pat in patterns:
        for f in sorted(forms):
            for m in pat.finditer(f):
                if _acts(f, m, verbs):
                    return risk, m.group(0)
    return None


def command_risk(text: str):
    text = unicodedata.normalize("NFKC", strip_format(text or "")).translate(CONFUSABLE)
    for risk, pat in _COMMANDS:
        m = pat.search(text)
        if m:
            at = m.start() + len(m.group(0)) - len(m.group(0).lstrip(";&|`( \t\n"))     # past its separator
            start = max(text.rfind(c, 0, at) for c in ";&|\n") + 1
            if _HARMLESS_RUN.search(re.split(r"[;&|\n]", text[start:m.end()] + text[m.end():], maxsplit=1)[0]):
                continue
            return risk, m.group(0).strip()
    return None
