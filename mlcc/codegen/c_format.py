"""Layout of generated C: every line at most WIDTH columns, wrapped the way a careful person
would wrap it (argument lists aligned after the opening parenthesis, nested initializers one
level per indentation step, comments continued with " * ")."""
from __future__ import annotations

import re

WIDTH = 100
INDENT = "    "
# Below this many columns left after an opening parenthesis, continuation lines start one
# indentation step deeper than the statement instead of under the parenthesis.
MIN_ALIGNED = 40


def pack(items: list[str], first: str, cont: str, last: str, sep: str = ",",
         width: int = WIDTH) -> list[str]:
    """Items separated by `sep`, greedily packed: the first line starts with `first`, the
    following with `cont`, and `last` closes the list (on the last item's line). An item that
    does not fit on a line of its own still gets one."""
    lines: list[str] = []
    cur, empty = first, True
    for i, item in enumerate(items):
        text = item + (sep if i < len(items) - 1 else last)
        if not empty and len(cur) + 1 + len(text) > width:
            lines.append(cur)
            cur, empty = cont, True
        cur += text if empty else " " + text
        empty = False
    if not items:
        cur += last
    lines.append(cur)
    return lines


def call(head: str, args: list[str], tail: str = ";", indent: str = "",
         sep: str = ",") -> list[str]:
    """`head(args)tail`, e.g. a call statement or a prototype: one line when it fits, else the
    arguments packed under the parenthesis (or one step deeper when it is too far right)."""
    one = f"{indent}{head}({f'{sep} '.join(args)}){tail}"
    if len(one) <= WIDTH:
        return [one]
    col = len(indent) + len(head) + 1
    if WIDTH - col >= MIN_ALIGNED and all(col + len(a) + 2 + len(tail) <= WIDTH for a in args):
        return pack(args, f"{indent}{head}(", " " * col, f"){tail}", sep)
    deeper = indent + 2 * INDENT
    return [f"{indent}{head}("] + pack(args, deeper, deeper, f"){tail}", sep)


def comment(text: str, indent: str = "") -> list[str]:
    """A /* */ comment, wrapped at spaces (never inside [..]: shapes stay whole)."""
    one = f"{indent}/* {text} */"
    if len(one) <= WIDTH:
        return [one]
    words = [w for w in re.split(r" (?![^\[]*\])", text) if w]
    room = WIDTH - len(indent) - 3
    pieces: list[str] = []
    for w in words:       # a word longer than a line (a huge name) is cut, not overflowed
        pieces += [w[i:i + room] for i in range(0, len(w), room)] or [w]
    lines = pack(pieces, f"{indent}/* ", f"{indent} * ", " */", sep="")
    return _fix_close(lines, indent)


def _fix_close(lines: list[str], indent: str) -> list[str]:
    if len(lines[-1]) > WIDTH:           # " */" did not fit after the last word
        lines[-1] = lines[-1][:-3]
        lines.append(f"{indent} */")
    return lines


def define(name: str, value: str, note: str = "") -> list[str]:
    """#define NAME VALUE, with a trailing comment when it fits (else the note goes above)."""
    line = f"#define {name} {value}"
    if note and len(line) + len(note) + 8 <= WIDTH:
        return [f"{line}  /* {note} */"]
    lines = comment(note) if note else []
    if len(line) > WIDTH:
        return lines + [f"#define {name} \\", f"{INDENT}{value}"]
    return lines + [line]


def initializer(head: str, value, render, indent: str = "", tail: str = ";") -> list[str]:
    """`head{...}tail` for a (nested) dict or list: one line when it fits, else one level per
    indentation step, short members packed on a line. `render` prints a leaf value."""
    items = _members(value, render)
    return _block(head, items, indent, tail, render)


def _members(value, render) -> list[tuple[str, object]]:
    if isinstance(value, dict):
        return [(f".{k} = ", v) for k, v in value.items()]
    return [("", v) for v in value]


def _flat(value, render) -> str:
    if isinstance(value, (dict, list, tuple)):
        return "{" + ", ".join(p + _flat(v, render) for p, v in _members(value, render)) + "}"
    return render(value)


def _block(head: str, items, indent: str, tail: str, render) -> list[str]:
    flat = [p + _flat(v, render) for p, v in items]
    one = f"{indent}{head}{{{', '.join(flat)}}}{tail}"
    if len(one) <= WIDTH:
        return [one]
    inner = indent + INDENT
    lines = [f"{indent}{head}{{"]
    run: list[str] = []          # consecutive members that fit on a line, packed together

    def flush(last: bool):
        if run:
            lines.extend(pack(run, inner, inner, "" if last else ","))
            run.clear()

    for i, ((prefix, v), text) in enumerate(zip(items, flat)):
        last = i == len(items) - 1
        if len(inner) + len(text) + 1 <= WIDTH:
            run.append(text)
            continue
        flush(False)
        sub_tail = "" if last else ","
        if isinstance(v, (dict, list, tuple)):
            lines.extend(_block(prefix, _members(v, render), inner, sub_tail, render))
        else:
            lines.extend(_long_leaf(text, inner, sub_tail))
    flush(True)
    lines.append(f"{indent}}}{tail}")
    return lines


def _long_leaf(text: str, indent: str, tail: str) -> list[str]:
    """A leaf too long for one line: a string literal is split into adjacent literals (which
    C concatenates); anything else is left whole."""
    m = re.fullmatch(r'(.*?)"(.*)"', text)
    if not m:
        return [indent + text + tail]
    prefix, body = m.groups()
    room = WIDTH - len(indent) - 2 - len(tail)
    chunks, cur = [], ""
    for tok in re.findall(r"\\.|.", body):        # never split an escape sequence
        if len(cur) + len(tok) > room:
            chunks.append(cur)
            cur = ""
        cur += tok
    chunks.append(cur)
    lines = [f'{indent}{prefix}"{chunks[0]}"'] if prefix and \
        len(indent) + len(prefix) + len(chunks[0]) + 2 <= WIDTH else \
        ([indent + prefix.rstrip()] if prefix else []) + [f'{indent}"{chunks[0]}"']
    lines += [f'{indent}"{c}"' for c in chunks[1:]]
    lines[-1] += tail
    return lines
