#!/usr/bin/env python3
"""Compiles the C++ snippets of the project's Markdown files that are marked as compiled, and runs the marked Python
ones, so that a guide whose code no longer builds against the headers (or no longer runs against the module) fails the
tests (`ctest -R snippets`) instead of misleading its reader.

    scripts/check_snippets.py [--have FEATURE]... [--python EXE] [--jobs N] ROOT -- COMPILER [FLAG]...

A snippet is marked by an HTML comment (invisible on the rendered page) on the line right before its ```cpp fence:

    <!-- snippet -->                     the block is a function body: its #include lines go to file scope, the rest
                                         into a function, so `engine.Push(...)` statements compile as they are shown
    <!-- snippet file -->                the block is a whole translation unit (it has its own main, say)
    <!-- snippet requires=mpi -->        compiled only when --have mpi is given (the build found MPI); else skipped
    <!-- snippet                         lines up to the closing --> are a prelude, put at file scope before the block:
    #include <depengine/engine/engine.h> what the shown code takes from its context (an engine, a function it calls),
    extern depengine::Engine engine;     declared rather than shown
    -->
    <!-- snippet requires=python -->     before a ```python block: run by --python EXE when --have python is given
                                         (ctest gives it a PYTHONPATH where the build's module is)

Each C++ snippet is compiled on its own with COMPILER FLAG... -fsyntax-only (parsed and its templates instantiated, not
code-generated), with #line directives so that an error names the Markdown file and line. ROOT is a folder (its
Markdown files, less build output, hidden folders and the fixtures) or one Markdown file. Prints each snippet that
fails as FILE:LINE: the snippet does not compile (or run), with the compiler's (or Python's) messages, then a count;
exits 1 if any failed or if a marker is not followed by a ```cpp or ```python block.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

# snippet_fixtures/ holds the broken snippets that show this script fails on them (test/scripts/): checked on their own.
SKIPPED_DIRS = {"build", "node_modules", "__pycache__", "link_fixtures", "snippet_fixtures"}
MARKER = re.compile(r"^\s*<!--\s*snippet\b(.*)$")
INCLUDE = re.compile(r"^\s*#\s*include\b")


class Snippet:
    def __init__(self, path, marker_line, options, prelude, first_line, body, language):
        self.path = path
        self.marker_line = marker_line  # 1-based line of the <!-- snippet marker
        self.options = options  # the words after "snippet": "file", "requires=X"
        self.prelude = prelude  # [(line number, text)]
        self.first_line = first_line  # 1-based line of the block's first code line
        self.body = body  # [text]
        self.language = language  # "cpp" or "python"

    def requires(self):
        return [o.split("=", 1)[1] for o in self.options if o.startswith("requires=")]

    def source(self):
        """The translation unit: includes first, then the prelude, then the block, each under a #line of its own."""
        name = self.path.replace("\\", "\\\\").replace('"', '\\"')
        out = []
        whole_file = "file" in self.options
        for number, text in self.prelude:
            if INCLUDE.match(text):
                out += [f'#line {number} "{name}"', text]
        if not whole_file:
            for offset, text in enumerate(self.body):
                if INCLUDE.match(text):
                    out += [f'#line {self.first_line + offset} "{name}"', text]
        for number, text in self.prelude:
            if not INCLUDE.match(text):
                out += [f'#line {number} "{name}"', text]
        if whole_file:
            out.append(f'#line {self.first_line} "{name}"')
            out += self.body
        else:
            # A function body: the block's includes were hoisted above, and leave blank lines so that line numbers hold.
            out.append("[[maybe_unused]] static void depengine_snippet() {")
            out.append(f'#line {self.first_line} "{name}"')
            out += ["" if INCLUDE.match(text) else text for text in self.body]
            out.append("}")
        return "\n".join(out) + "\n"


def markdown_files(root):
    if os.path.isfile(root):
        yield root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def snippets_of(path, display):
    """The marked snippets of one file, and the errors of markers that mark no ```cpp block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, errors = [], []
    i = 0
    while i < len(lines):
        match = MARKER.match(lines[i])
        if match is None:
            i += 1
            continue
        marker_line = i + 1
        rest = match.group(1)
        prelude = []
        if "-->" in rest:
            words = rest.split("-->", 1)[0].split()
            i += 1
        else:
            words = rest.split()
            i += 1
            while i < len(lines) and "-->" not in lines[i]:
                prelude.append((i + 1, lines[i]))
                i += 1
            i += 1  # the closing -->
        fence = re.match(r"^\s*```\s*(cpp|c\+\+|python)\s*$", lines[i]) if i < len(lines) else None
        if fence is None:
            errors.append(
                f"{display}:{marker_line}: a snippet marker must be followed, on the next line, by a ```cpp or ```python block")
            continue
        language = "python" if fence.group(1) == "python" else "cpp"
        first_line = i + 2
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            errors.append(f"{display}:{marker_line}: the snippet's ```cpp block is not closed")
            break
        found.append(Snippet(display, marker_line, words, prelude, first_line, body, language))
        i += 1
    return found, errors


def check_one(snippet, command, python, folder, index):
    """(passed, output) of compiling a C++ snippet, or of running a Python one (its lines padded so that a traceback
    names the Markdown file's line)."""
    if snippet.language == "python":
        source = os.path.join(folder, f"snippet_{index}.py")
        with open(source, "w", encoding="utf-8") as f:
            f.write("\n" * (snippet.first_line - 1) + "\n".join(snippet.body) + "\n")
        result = subprocess.run([python, source], capture_output=True, text=True, timeout=120)
        output = (result.stdout + result.stderr).replace(source, snippet.path).strip()
        return result.returncode == 0, output
    source = os.path.join(folder, f"snippet_{index}.cpp")
    with open(source, "w", encoding="utf-8") as f:
        f.write(snippet.source())
    result = subprocess.run(command + ["-fsyntax-only", source], capture_output=True, text=True)
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: check_snippets.py [--have FEATURE]... [--jobs N] ROOT -- COMPILER [FLAG]...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description="Compiles the marked C++ snippets of Markdown files.")
    parser.add_argument("root")
    parser.add_argument("--have", action="append", default=[], help="a feature the build has (mpi)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs Python snippets")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        sys.exit("check_snippets: no compiler given after --")

    root = os.path.abspath(args.root)
    base = root if os.path.isdir(root) else os.path.dirname(root)
    snippets, errors = [], []
    for path in markdown_files(root):
        found, bad = snippets_of(path, os.path.relpath(path, base))
        snippets += found
        errors += bad

    runnable = [s for s in snippets if all(r in args.have for r in s.requires())]
    skipped = len(snippets) - len(runnable)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="depengine_snippets_") as folder:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda pair: check_one(pair[1], command, args.python, folder, pair[0]),
                                    enumerate(runnable)))
    for snippet, (ok, output) in zip(runnable, results):
        if not ok:
            failed += 1
            verb = "does not run" if snippet.language == "python" else "does not compile"
            print(f"{snippet.path}:{snippet.marker_line}: the snippet {verb}:\n{output}\n")
    for error in errors:
        print(error)
    print(f"snippets: {failed} of {len(runnable)} failed, {skipped} skipped (requires), "
          f"{len(errors)} bad marker(s)")
    if not snippets and not errors:
        print("snippets: no marked snippet found: nothing was checked")
        return 1
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
