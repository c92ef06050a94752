"""The `ptb` task's Report from an EVALB evaluation: EVALB's output first, byte for byte, then what it warns about."""

from __future__ import annotations

from seqxduce.api import Report

from . import evalb
from .linearize import PLACEHOLDER

UNKNOWN = "<unk>"  # how the word tokenizer writes an unknown id, so it can stand at a placeholder's place
PLACEHOLDER_NOTE = ("the gold POS tags were re-attached to their leaves before scoring (standard practice; benepar "
                    "does the same): punctuation is found by the gold tags and the tagging accuracy above is not a "
                    "measure of the parser.")
SETTING_REASON = "were written with the placeholder XX instead of POS tags (keep_pos_tags = false)"
LEAVES_REASON = f"carry only the placeholder tag {PLACEHOLDER} (or {UNKNOWN}) instead of POS tags"
MESSAGES_TITLE = "EVALB's messages (the original prints them on stderr; error sentences are left out of the totals):"
SIGNATURE = "EVALB COLLINS.prm (seqxduce_parsing.evalb)"
LISTED = 10  # line numbers named in the warning


def build_report(ev: evalb.Evaluation, reason: str) -> Report:
    """EVALB's text with its messages and notes appended, the metrics to log, and the outputs it could not score."""
    text = evalb.format_report(ev.scores)
    if ev.messages:
        text += f"\n{MESSAGES_TITLE}\n" + "".join(f"{m}\n" for m in ev.messages)
    for note in notes(ev, reason):
        text += f"\nNote: {note}\n"
    metrics = evalb.metrics(ev.scores)
    # the share of test trees scored with gold tags: 1.0 for a tag-less model, 0.0 for predicted tags
    metrics["gold_tags_reattached"] = ev.reattached / ev.test_trees if ev.test_trees else 0.0
    invalid, warning = unscored(ev)
    return Report(metrics=metrics, primary="f1", text=text, invalid=invalid, warning=warning,
                  signature=SIGNATURE + (", gold POS tags re-attached" if ev.reattached else ""))


def notes(ev: evalb.Evaluation, reason: str) -> list[str]:
    """Where the figures are not what the original program would print, and what was done to the test trees."""
    out = []
    stop = ev.stop_line
    if stop is not None:
        unreadable = any(m.line == stop and m.text == evalb.READING_SENTENCE for m in ev.messages)
        why = ("it cannot read that line (a character outside a label or a word) and repeats 'Reading sentence' "
               "until it gives up" if unreadable else
               f"more than {evalb.MAX_ERROR} errors (COLLINS.prm's MAX_ERROR)")
        out.append(f"the original EVALB stops at line {stop} without a summary: {why}. Every line is scored here, "
                   "a line it cannot read as an error sentence.")
    for line, limits in ev.beyond_limits.items():
        out.append(f"line {line} has {' and '.join(limits)}, beyond the original EVALB's fixed buffers: it "
                   "overflows them or splits the line, so its figures there are not reliable; scored here as by "
                   "EVALB built with larger buffers.")
    if ev.undefined:
        out.append(f"line(s) {numbers(ev.undefined)} close more brackets than were opened so often that the "
                   "original EVALB overwrites its own variables; counted here as error sentences.")
    if ev.reattached:
        out.append(f"{ev.reattached} of {ev.test_trees} test trees {reason}, so {PLACEHOLDER_NOTE}")
    return out


def unscored(ev: evalb.Evaluation) -> tuple[int, str]:
    """How many outputs the figures leave out (error sentences, empty outputs, unpaired lines), and one line
    naming them."""
    errors = ev.lines_with(evalb.ERROR)
    skipped = [i for i in ev.lines_with(evalb.SKIP) if ev.scores[i - 1].gold_words]
    parts = []
    if errors:
        parts.append(f"{plural(len(errors), 'error sentence')} (line{'s' * (len(errors) > 1)} {numbers(errors)})")
    if skipped:
        parts.append(f"{plural(len(skipped), 'output')} with no words, skipped "
                     f"(line{'s' * (len(skipped) > 1)} {numbers(skipped)})")
    if ev.unpaired:
        parts.append(f"{plural(len(ev.unpaired), 'line')} without a partner ({ev.test_lines} outputs for "
                     f"{ev.gold_lines} references: line{'s' * (len(ev.unpaired) > 1)} {numbers(ev.unpaired)})")
    if not parts:
        return 0, ""
    return (len(errors) + len(skipped) + len(ev.unpaired),
            f"{', '.join(parts)}: EVALB leaves them out of the figures above (its messages say why)")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def numbers(lines: list[int]) -> str:
    """The first line numbers, comma-separated."""
    shown = ", ".join(map(str, lines[:LISTED]))
    return shown + (", ..." if len(lines) > LISTED else "")
