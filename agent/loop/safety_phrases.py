"""What dialogs and pages say, for the safety gate (`embodia.agent.loop.safety`): the words of a
confirmation, of a dialog that asks before it acts, of money and payment pages, of what a dialog
says is lost or allowed, and of the safeguards a switch can turn off.

>>> bool(CONFIRM.match("ok")), bool(ASKS.search("12 items were deleted.")), bool(EXISTS.search("It already exists."))
(True, False, True)
"""
from __future__ import annotations

import re

from embodia.agent.loop.safety_words import pattern

# a button that agrees to whatever its dialog asks
CONFIRM = re.compile(r"^(ok|okay|yes|y|sure|proceed|continue|confirm|submit|apply|accept|agree|go|authorize|approve|"
                     r"yes i m sure|i m sure|i understand|yes continue|leave|leave anyway|quit|quit anyway|exit|"
                     r"close anyway|ja|oui|si|sim|aceptar|confirmar|continuar|"
                     r"bestatigen|fortfahren|confirmer|valider|continuer|conferma|procedi|да|подтвердить|продолжить|"
                     r"确定|确认|好|是|继续|はい|確認|続行|확인|예)$")
# a dialog that asks before it acts, rather than reporting what happened ("12 items were deleted.")
ASKS = re.compile(r"[?\uff1f]|\bwill\b|\bcan ?not be (undone|reversed)|can't be (undone|reversed)|\bpermanently\b|"
                  r"\bare you sure\b|\babout to\b|\bdo you want\b|"
                  r"\breally\b|\bwirklich\b|d[eé]finitivement|irr[eé]versible|endg[uü]ltig", re.I)
MONEY = re.compile(r"[$€£¥₹]\s?\d|\d\s?(€|eur|usd|gbp|btc|eth|usdc|usdt)\b", re.I)
PAY_CONTEXT = pattern(["checkout", "check out", "payment", "payment details", "card number", "cvc", "cvv",
                        "charged", "billed", "billing", "card ending"])
# weaker words: paying only beside an amount ("Total: $23.40")
PRICE_CONTEXT = pattern(["pay", "total", "order total", "price", "amount", "amount due", "subtotal"])
# words that make a dialog destructive only as its question ("Replace it?"), not as a button's label
CONTEXT_ONLY = [("delete", pattern(["replace", "overwrite", "will be lost", "may not be saved", "not be saved",
                                      "lose access", "will lose", "stop working", "no longer be visible",
                                      "no longer be available", "no longer work"])),
                ("install", pattern(["requires your permission", "access your data", "permissions", "extension",
                                      "add on", "unknown apps", "unknown sources"]))]
# confirmations of more than one word ("I understand, proceed", "Yes, continue anyway"): confirm
# words only, one of them a core one
CONFIRM_CORE = {"ok", "okay", "yes", "proceed", "continue", "confirm", "approve", "authorize", "agree", "accept",
                "understand", "sure"}
CONFIRM_FILLER = CONFIRM_CORE | {"i", "m", "im", "it", "do", "and", "anyway", "please", "now", "let", "s", "go"}
# a Replace / Overwrite button deletes what is there when its dialog says a file of that name exists
REPLACE = [("delete", pattern(["replace", "replace all", "overwrite", "ersetzen", "uberschreiben", "remplacer",
                                "ecraser", "reemplazar", "sobrescribir", "substituir", "sostituisci", "заменить",
                                "перезаписать", "替换", "覆盖", "置き換え", "上書き", "바꾸기", "덮어쓰기"]))]
EXISTS = re.compile(r"already exists|\balready (a|an|one)\b|\bexisting\b|overwrit|will be replaced|same name|"
                    r"existiert bereits|bereits vorhanden|existe d[ée]j[àa]|ya existe|j[áa] existe|gi[àa] esiste|"
                    r"уже существует|已存在|已经存在|既に存在|すでに存在|이미 존재", re.I)
# what keeps a machine or an account safe: switching it off while it is on is a risk
GUARD = re.compile(r"\b(firewall|antivirus|anti virus|virus (and threat )?protection|real.?time protection|"
                   r"defender|screen lock|2.?step verification|two.?factor|find my (device|phone)|encryption)\b", re.I)
# what a dialog's own button sends ("Share" under 'Share "Budget"')
SHARE = pattern(["share", "submit", "invite"])
# a page that sets a secret ("Confirm your new PIN"): its confirm button changes it
NEW_SECRET = re.compile(r"\b(new|confirm (your )?(new )?|re.?enter (your )?(new )?)(password|passcode|pin|passphrase)\b",
                        re.I)
# a sentence about the other choice ("If you don't save, changes will be lost")
OTHERWISE = re.compile(r"\bif you (don.?t|do not)\b|\botherwise\b|\bsi no\b|\bwenn sie nicht\b", re.I)
