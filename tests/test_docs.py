"""The documentation must stay true: the README's C and Python examples compile and run against
the digits model, docs/conformance.md lists exactly the registered operators, and every relative
link in README.md and docs/*.md points to a file (and heading) that exists."""
import re
import subprocess
import sys
from pathlib import Path

import mlcc
from mlcc.ops import registered_ops
from mlcc.ops.registry import _REGISTRY

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOC_FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))

# Pages that other branches add to docs/ (the lead merges them). A link to one of these is
# tolerated while the file is absent, with a warning; once it exists it is checked like any other.
# Remove names from this set once their files are merged.
def fenced_block(text: str, lang: str, after_heading: str) -> str:
    """The first ```lang block after the heading line `after_heading`."""
    section = text.split(f"\n{after_heading}\n", 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)


def test_readme_c_example_compiles_and_runs(tmp_path):
    code = fenced_block(README, "c", "## C example")
    out = tmp_path / "build" / "digits"
    mlcc.compile(ROOT / "examples/digits/digits_cnn.onnx", out, name="digits")
    (tmp_path / "main.c").write_text(code)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{out}",
                    f"-I{out}/runtime/include", str(tmp_path / "main.c"), f"-L{out}", "-lmodel",
                    f"-Wl,-rpath,{out}", "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("logit[0] = ")


def test_readme_python_example_runs(tmp_path):
    """The example as a user runs it: from a folder where examples/ is the repository's."""
    code = fenced_block(README, "python", "## Python example")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "example.py").write_text(code)
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"predicted digit: \d", lines[0]), proc.stdout
    assert lines[1].startswith("True [('logits', "), proc.stdout


def test_operator_table_matches_the_registry():
    text = (ROOT / "docs" / "conformance.md").read_text()
    section = text.split("\n## Supported operators\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([A-Z][A-Za-z0-9]+)`", section))
    assert listed == set(registered_ops()), (
        f"missing from docs/conformance.md: {sorted(set(registered_ops()) - listed)}; "
        f"not registered: {sorted(listed - set(registered_ops()))}")


def test_operator_count_matches_the_registry():
    """The number of default-domain operators docs/conformance.md states (the one place that
    gives it: the README links there)."""
    count = sum(1 for (domain, _) in _REGISTRY if domain == "")
    conformance = (ROOT / "docs" / "conformance.md").read_text()
    assert re.findall(r"(\d+) operators of the default ONNX domain", conformance) == [str(count)]


def marker_section(text: str, name: str) -> list[list[str]]:
    """The table rows (cells) between the markers of tools/conformance.py MARKERS[name]."""
    import conformance
    begin, end = conformance.MARKERS[name]
    assert text.count(begin) == 1 and text.count(end) == 1, name
    body = text.split(begin, 1)[1].split(end, 1)[0].strip().splitlines()
    assert body and all(line.startswith("|") and line.endswith("|") for line in body), body
    return [[c.strip() for c in line.strip("|").split("|")] for line in body[2:]]


def test_generated_conformance_tables_parse():
    """docs/conformance.md's two tables that `tools/conformance.py --write-docs` writes: the
    per-operator rows add up to the total row, and the category table lists the categories
    and operators of mlcc/ops/refusals.py, whose refused tests add up to the total's."""
    import conformance
    from mlcc.ops.refusals import CATEGORIES, REFUSED
    text = (ROOT / "docs" / "conformance.md").read_text()
    rows = marker_section(text, "results per operator")
    *ops, total = rows
    counts = [[int(c) for c in row[1:]] for row in ops]
    assert [r[0] for r in ops] == sorted(r[0] for r in ops)
    assert total[0].startswith(f"**total ({sum(map(sum, counts))} tests, {len(ops)} operators)")
    assert [int(c) for c in total[1:]] == [sum(col) for col in zip(*counts)]
    cats = marker_section(text, "refusal categories")
    assert [r[0] for r in cats] == list(CATEGORIES) + [conformance.OTHER]
    for row in cats[:-1]:
        assert set(re.findall(r"`(\w+)`", row[1])) == {o for o, c in REFUSED.items()
                                                        if c == row[0]}
    assert sum(int(r[2]) for r in cats) == int(total[3])


def test_conformance_writer_is_deterministic_and_merges(tmp_path):
    """--write-docs on a copy of the page: the same results in any order write the same text,
    and --merge replaces the rows of the operators run again."""
    import json
    import conformance
    from mlcc.ops.refusals import RANDOM
    R = conformance.Result
    old = [R("test_a", "Abs", "passed", ""), R("test_b", "Bernoulli", "refused", "x", (), RANDOM),
           R("test_c", "Abs", "refused", "attribute")]
    report = tmp_path / "old.json"
    report.write_text(json.dumps([{"test": r.name, "op": r.op, "status": r.status,
                                   "why": r.why, "category": r.category} for r in old]))
    page = tmp_path / "conformance.md"
    page.write_text((ROOT / "docs" / "conformance.md").read_text())
    conformance.write_docs(old, page)
    first = page.read_text()
    conformance.write_docs(list(reversed(old)), page)
    assert page.read_text() == first
    assert "| Abs | 1 | 0 | 1 | 0 |" in first and "| Bernoulli | 0 | 0 | 1 | 0 |" in first
    merged = conformance.merge([R("test_c", "Abs", "passed", "")], report)
    conformance.write_docs(merged, page)
    text = page.read_text()
    assert "| Abs | 2 | 0 | 0 | 0 |" in text
    assert "**total (3 tests, 2 operators)** | 2 | 0 | 1 | 0 |" in text
    refused = {r[0]: int(r[2]) for r in marker_section(text, "refusal categories")}
    assert refused[RANDOM] == 1 and refused[conformance.OTHER] == 0


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for the Markdown headings of a page (outside fenced code)."""
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"#{1,6} (.*?)#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))   # a link: its text
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def relative_links(text: str) -> list[str]:
    """Targets of the Markdown links and images of a page that are not URLs, outside code."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_relative_links_resolve():
    broken = []
    for page in DOC_FILES:
        rel_page = page.relative_to(ROOT)
        for target in relative_links(page.read_text()):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
            if not dest.exists():
                broken.append(f"{rel_page}: {target} (no such file)")
                continue
            if anchor and dest.suffix == ".md" and anchor not in heading_anchors(
                    dest.read_text()):
                broken.append(f"{rel_page}: {target} (no heading #{anchor} in {rel})")
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken)


def test_link_checker_finds_broken_links(tmp_path):
    """The checker's own parts: anchors as GitHub makes them, links outside code only."""
    assert heading_anchors("# A, b: c\n## Set-up: two commands\n## A, b: c\n") == {
        "a-b-c", "set-up-two-commands", "a-b-c-1"}
    assert "wasm-webassembly" in heading_anchors("### wasm (WebAssembly)\n")
    assert relative_links("[a](x.md#y) `[b](no.md)` [c](https://e.org)\n```\n[d](z.md)\n```"
                          ) == ["x.md#y"]
