#!/usr/bin/env python3
"""Doxygen's INPUT_FILTER for depengine's headers (docs/Doxyfile.in): hands Doxygen the headers' plain `//` comments as
documentation, so that the headers stay written for their readers and the reference is generated from them as they are.

    scripts/doxygen_filter.py HEADER      (prints the filtered header on stdout; Doxygen calls it once per file)

- The opening comment of the file (the lines before `#pragma once`) becomes the file's documentation (`\\file`).
- A class, struct, enum or type alias with no comment of its own that the opening comment names is documented by
  that comment: its page points at the file's.
- A block of `//` lines right before a declaration, at namespace or class scope, becomes `///` (its documentation).
  Right before a run of declarations with no blank line between them (accessors, constructors), it documents each of
  them, as a reader of the header takes it: the run becomes a member group (DISTRIBUTE_GROUP_DOC).
  Comments before what Doxygen does not document (an include, a namespace, an access specifier, a preprocessor line, a
  closing brace) and comments inside function bodies stay plain comments.
- A trailing `// ...` after a member or an enumerator (a line that ends in `;` or `,` before the comment) becomes
  `///< ...`; one continued on the following lines, in the same column, takes them along.
- In the text handed over, what Doxygen would read as markup is escaped outside `code spans` and "quoted text": `<`
  and `>` (HTML tags), `\\` and `@` (commands), `#` before a name (a link request) and `&` (an entity), so that prose
  such as `ExecutorId<E>` or `x << 1` is shown as written and a broken "reference" cannot appear where none was meant.
  A clang-tidy directive (`NOLINTNEXTLINE(check):`) is dropped; the reason written after it is kept.

Lines keep their numbers (nothing is added or removed), so Doxygen's warnings point at the header's own lines.
"""
import os
import re
import sys

# A line that opens a scope of declarations (its braces hold declarations, not statements or an initializer).
DECLARATION_SCOPE = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace|class|struct|union|enum)\b|^\s*extern\s+\"C\"")
# Lines a comment right above does not document for Doxygen (a macro definition is documented; other directives not).
NOT_DOCUMENTED = re.compile(
    r"^\s*(#(?!\s*define\b)|namespace\b|}|public:|private:|protected:|using\s+namespace\b|static_assert\b)")
# A class, struct, union or enum being defined; group 3 is its name.
COMPOUND = re.compile(
    r"^(\s*)((?:template\s*<.*>\s*)?(?:class|struct|union|enum(?:\s+class)?)\s+(?:\[\[[^\]]*\]\]\s*)?(\w+))")
# A type alias; group 3 is its name.
ALIAS = re.compile(r"^(\s*)(using\s+(\w+)\s*=)")


def skip_literal(text, i):
    """The index just past the string or character literal that opens at text[i] (a quote); a digit separator (1'000)
    opens none, so just past it."""
    if text[i] == "'" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
        return i + 1
    quote, i = text[i], i + 1
    while i < len(text) and text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def split_comment(line):
    """(code, comment) of a line: the `//` comment outside string and character literals, or (line, None)."""
    i = 0
    while i < len(line):
        if line[i] in "\"'":
            i = skip_literal(line, i)
        elif line.startswith("//", i):
            return line[:i], line[i:]
        elif line.startswith("/*", i):
            end = line.find("*/", i + 2)
            if end < 0:
                return line, None
            i = end + 2
        else:
            i += 1
    return line, None


def braces(code):
    """The braces of a line of code, in order, without those in literals."""
    out, i = [], 0
    while i < len(code):
        if code[i] in "\"'":
            i = skip_literal(code, i)
            continue
        if code[i] in "{}":
            out.append(code[i])
        i += 1
    return out


def escape(text):
    """Doxygen markup in prose escaped, outside code spans and quoted text."""
    parts = re.split(r"(`[^`]*`|\"[^\"]*\")", text)  # code spans and quoted text: Doxygen takes them as written
    for k in range(0, len(parts), 2):
        p = parts[k]
        p = p.replace("\\", "\\\\").replace("@", "\\@").replace("<", "\\<").replace(">", "\\>")
        p = p.replace("&", "\\&")
        p = re.sub(r"#(?=\w)", r"\\#", p)
        parts[k] = p
    return "".join(parts)


def unlinted(text):
    """A comment's text less a leading clang-tidy directive (NOLINT, NOLINTNEXTLINE(check):)."""
    return re.sub(r"^\s*NOLINT(NEXTLINE)?(\([^)]*\))?:?", "", text)


def doc(comment, marker):
    """A `// text` comment as a Doxygen comment with `marker` (///, ///<, //!)."""
    return marker + escape(unlinted(comment[2:]))


def declaration_run(lines, i):
    """The lines from i on that hold whole declarations one after the other (each ending in ; or a closed body, on one
    line or several), with no blank line, comment line or documenting trailing comment of their own between them."""
    run, j = [], i
    while j < len(lines):
        code, comment = split_comment(lines[j])
        if not code.strip() or NOT_DOCUMENTED.match(code) or code.lstrip().startswith("#"):
            break  # not a macro: a group's closing comment cannot follow one on its line (it would join its text)
        if comment and not comment.startswith("// NOLINT") and re.search(r"[;,]\s*$", code):
            break  # a member documented by its own trailing comment
        depth, k = 0, j
        while k < len(lines):
            code_k = split_comment(lines[k])[0]
            for b in braces(code_k):
                depth += 1 if b == "{" else -1
            if depth <= 0 and re.search(r"[;}]\s*$", code_k):
                break
            k += 1
        if k >= len(lines):
            break
        run.extend(range(j, k + 1))
        j = k + 1
    return run


def declarations(lines, run):
    """How many declarations a run holds: the lines that start one (the previous line of the run ended one)."""
    return 1 + sum(1 for a in run[:-1] if re.search(r"[;}]\s*$", split_comment(lines[a])[0]))


def filter_header(lines, path):
    """The lines of a header as Doxygen should read them; `path` is the header's path in the repository."""
    out = list(lines)
    n = len(lines)
    # The opening comment, before `#pragma once`: the file's documentation.
    pragma = next((i for i, l in enumerate(lines) if l.strip() == "#pragma once"), None)
    if pragma is not None and pragma > 0 and all(l.strip().startswith("//") or not l.strip() for l in lines[:pragma]):
        comment_lines = [i for i in range(pragma) if lines[i].strip().startswith("//")]
        for i in comment_lines:
            out[i] = doc(lines[i].strip(), "//!")
        if comment_lines:
            # At the end of the block's last line, so that no line is added and no text follows it (\file would take
            # the rest of its line as a file name).
            out[comment_lines[-1]] += " \\file"
    opening = " ".join(lines[i] for i in range(pragma or 0))
    # Scopes: a stack of True (namespace, class, struct, enum: declarations) and False (function bodies, initializers).
    stack = []
    block = []  # indices of the pending block of comment-only lines
    start = pragma + 1 if pragma is not None else 0
    trailing_column = None  # the column of the trailing comment just converted: comment-only lines there continue it
    for i in range(start, n):
        line = lines[i]
        stripped = line.strip()
        at_declaration_scope = all(stack)
        if stripped.startswith("//") and not stripped.startswith("///"):
            if trailing_column is not None and line.index("//") == trailing_column and at_declaration_scope:
                out[i] = line[:trailing_column] + doc(stripped, "///<")
                continue
            trailing_column = None
            block.append(i)
            continue
        trailing_column = None
        if not stripped:
            block = []
            continue
        code, comment = split_comment(line)
        match = COMPOUND.match(code)
        if match is None or "{" not in code:
            match = ALIAS.match(code) if len(stack) <= 1 else None  # a type alias at namespace scope
        if not block and at_declaration_scope and match and re.search(r"\b%s\b" % match.group(3), opening):
            # A class the file's opening comment describes, with no comment of its own: that comment is its
            # documentation, and the class's page points at it (on the same line: line numbers hold).
            out[i] = f"{match.group(1)}/** Described by the opening comment of \\ref {path}. */ {line.lstrip()}"
        if block:
            if at_declaration_scope and not NOT_DOCUMENTED.match(code):
                run = declaration_run(lines, i)
                # A linter's directive is no documentation; the reason written after it is.
                block = [j for j in block if unlinted(lines[j].strip()[2:]).strip()]
                if block and declarations(lines, run) < 2:
                    for j in block:
                        s = lines[j]
                        out[j] = s[: len(s) - len(s.lstrip())] + doc(s.strip(), "///")
                elif block:
                    # A comment over a run of declarations documents each of them (a member group, whose
                    # documentation DISTRIBUTE_GROUP_DOC hands to every member), as a reader of the header takes it.
                    for k, j in enumerate(block):
                        s = lines[j]
                        text = escape(unlinted(s.strip()[2:])).replace("*/", "*\\/")
                        indent = s[: len(s) - len(s.lstrip())]
                        out[j] = indent + ("/** @{" if k == 0 else "   ") + text + (" */" if j == block[-1] else "")
                    last = run[-1]
                    last_code, last_comment = split_comment(lines[last])
                    out[last] = last_code.rstrip() + " /** @} */" + ((" " + last_comment) if last_comment else "")
            block = []
        if comment is not None and not comment.startswith("///") and not comment.startswith("// NOLINT") \
                and at_declaration_scope:
            if re.search(r"[;,]\s*$", code) and not NOT_DOCUMENTED.match(code):
                out[i] = code + doc(comment, "///<")
                trailing_column = len(code)
        opens_declaration_scope = bool(DECLARATION_SCOPE.match(code))
        for b in braces(code):
            if b == "{":
                stack.append(opens_declaration_scope)
                opens_declaration_scope = False  # a second brace on the line (an initializer) is not a scope
            elif stack:
                stack.pop()
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().split("\n")
    # The path Doxygen shows for the file (STRIP_FROM_PATH: relative to the repository), found from this script's place.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.relpath(os.path.abspath(sys.argv[1]), root)
    sys.stdout.write("\n".join(filter_header(lines, path)))


if __name__ == "__main__":
    main()
