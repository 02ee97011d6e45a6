"""The test suite, the benchmarks and the tools run on a fresh clone (docs/style.md, "Tests run
on a fresh clone"): nothing under tests/, bench/, tools/ or examples/ (nor the Makefile that
runs them) may read a file outside the repository other than the model cache
(tools/fetch_models.py) and installed packages, and tests/ holds tests, not scripts."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tests", "bench", "tools", "examples", "Makefile")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".c", ".h", ".js", ".mjs", ".html", ".json",
                 ".sh", ".cfg", ".toml", ""}

# What reaching out of the repository looks like. The sibling folder of development models
# (shared/ beside the checkout), any absolute path on a developer's machine, and path
# arithmetic that climbs above the root: Path(__file__).parents[k] with k at least the file's
# depth, or .parent of the root. (Strings like "../outside.bin" inside a model, which the
# fuzzer and the frontend tests feed to mlcc to check that it refuses them, are not reads and
# do not match.)
PATTERNS = {
    "the development models beside the checkout":
        re.compile(r"\.\./shared\b|[\"']shared[\"']\s*/\s*[\"']models[\"']|\bshared/models\b"),
    "a developer's absolute path": re.compile(r"[\"'`\s(](/work|/home|/Users)/\w"),
    "the root's parent": re.compile(r"\b(ROOT|REPO)\.parent\b|\bHERE\.parent\.parent\b"),
}
PARENTS = re.compile(r"__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")


def _files() -> list[Path]:
    """The files of FOLDERS that git knows of (tracked or not ignored)."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others",
                          "--exclude-standard", "--", *FOLDERS],
                         capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in sorted(set(out.splitlines())) if (ROOT / line).is_file()]


def outside_references(path: Path, text: str) -> list[str]:
    """Lines of `text` (the file at `path`) that refer to something outside the repository."""
    depth = len(path.relative_to(ROOT).parts)          # parents[depth] is the root's parent
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}")
        for m in PARENTS.finditer(line):
            if int(m.group(1)) >= depth:
                found.append(f"{path.relative_to(ROOT)}:{number}: parents[{m.group(1)}] "
                             f"climbs above the repository: {line.strip()}")
    return found


def test_nothing_refers_outside_the_repository():
    files = [f for f in _files()                     # this file holds the patterns
             if f.suffix in TEXT_SUFFIXES and f != Path(__file__).resolve()]
    assert any(f.name == "fetch_models.py" for f in files)          # the scan sees the tools
    bad = [hit for f in files for hit in outside_references(f, f.read_text(errors="replace"))]
    assert not bad, "\n".join(bad)


def test_the_check_catches_what_it_is_for():
    tool = ROOT / "tools" / "x.py"
    hits = outside_references(tool, "\n".join([
        'SHARED = ROOT.parent / "shared" / "models"',
        # (split so that a plain grep for such references does not flag this file)
        'p = Path(__file__).resolve().parents[2] / ' '"shared" / "models"',
        'data = np.load("..' '/shared/models/digits_test.npz")',
        'MODEL = "/work/shared/models/mobilenetv2.onnx"',
        'ROOT = Path(__file__).resolve().parents[1]',              # the root itself: fine
        'loc = "../outside.bin"  # an external-data location the compiler must refuse',
    ]))
    assert [h.split(":")[1] for h in hits] == ["1", "1", "2", "2", "3", "4", "4"], hits


def test_tests_folder_holds_no_scripts():
    """Benchmarks live in bench/, tools in tools/: a module of tests/ is a test file or a
    helper the tests import, never a program with its own command line."""
    scripts = [p.name for p in sorted((ROOT / "tests").glob("*.py"))
               if re.search(r"^if __name__ == [\"']__main__[\"']|^import argparse",
                            p.read_text(), re.M)]
    assert not scripts, f"move these to bench/ or tools/: {scripts}"
