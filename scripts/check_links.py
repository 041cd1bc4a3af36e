#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown files: every link to a file of the tree names one that exists,
and every #anchor names a heading of the page it points at (GitHub's anchors). Links to other sites are not followed.

    scripts/check_links.py [ROOT]

ROOT defaults to the repository this script is in. The Markdown files are those under ROOT, less build output, hidden
folders and the checker's own fixtures. Prints each broken link as FILE:LINE: what is wrong, then a count, and exits 1 if any is broken, so
that a file moved without its links being fixed fails the tests (`ctest -R links`).
"""
import os
import re
import sys

# [text](target) and ![alt](target); a target ends at the first space (a title may follow) or closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A reference definition: [label]: target
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# link_fixtures/ holds the broken links that show this script fails on them (test/scripts/): checked on their own.
SKIPPED_DIRS = {"build", "node_modules", "__pycache__", "link_fixtures"}


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def prose_lines(path, keep_code=False):
    """(line number, text) of each line outside fenced code blocks, with inline code spans blanked unless keep_code."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            stripped = line.lstrip()
            if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
                fence = stripped[:3]
                continue
            if fence is not None:
                if stripped.startswith(fence):
                    fence = None
                continue
            yield number, line if keep_code else re.sub(r"`+[^`]*`+", lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found = set()
        counts = {}
        for _, line in prose_lines(path, keep_code=True):
            match = HEADING.match(line)
            if not match:
                continue
            base = slug(match.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def check(root):
    problems = []
    files = 0
    for path in markdown_files(root):
        files += 1
        shown = os.path.relpath(path, root)
        for number, line in prose_lines(path):
            targets = [m.group(1) for m in LINK.finditer(line)]
            reference = REFERENCE.match(line)
            if reference:
                targets.append(reference.group(1))
            for target in targets:
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                    continue
                file_part, _, anchor = target.partition("#")
                linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(linked):
                    problems.append(f"{shown}:{number}: links to {target}, and {file_part} does not exist")
                    continue
                if not anchor or not linked.endswith(".md") or re.fullmatch(r"L\d+(-L\d+)?", anchor):
                    continue
                if anchor not in anchors(linked):
                    page = os.path.relpath(linked, root)
                    problems.append(f"{shown}:{number}: links to {target}, and {page} has no heading #{anchor}")
    return files, problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    files, problems = check(root)
    for problem in problems:
        print(problem)
    print(f"links: {len(problems)} broken link(s) in {files} Markdown files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
