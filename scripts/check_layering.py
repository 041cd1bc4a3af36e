#!/usr/bin/env python3
"""Fails on an include that goes up the library's layers (docs/architecture.md, "Layers").

    scripts/check_layering.py [ROOT]

ROOT defaults to the repository. Every file of the library folders (LIBRARY_ROOTS, bottom-up: support/ to distributed/)
may include files of its own layer and of the layers LAYERS lists for it, nothing else of ours; a `detail/` folder
belongs to the layer of its parent. examples/, bench/ and test/ sit above everything and are not checked. A library
folder with sources that the table does not place is an error too, so a new folder must be given its layer here.
The libraries' CMake targets are held to the same table: a folder's depengine_library() may list in DEPS only the
targets of the layers its files may include.

Prints one line per violation and exits 1; prints a summary and exits 0 when there is none. CTest runs it
(test/scripts/CMakeLists.txt), so the build's test suite rejects an upward include.
"""
import pathlib
import re
import sys

# Each layer and the layers below it that its files may include, lowest first.
LAYERS = {
    "support": [],
    "frontier": ["support"],
    "executors": ["frontier", "support"],
    "executors/threadpool": ["executors", "frontier", "support"],
    "executors/stream": ["executors", "frontier", "support"],
    "executors/host_stream": ["executors/stream", "executors", "frontier", "support"],
    "executors/cuda_stream": ["executors/stream", "executors", "frontier", "support"],
    "executors/hip_stream": ["executors/stream", "executors", "frontier", "support"],
    "executors/mpi": ["executors", "frontier", "support"],
    "memory": ["executors/stream", "frontier", "support"],
    "engine/var_queue": ["frontier", "support"],
    "engine": ["engine/var_queue", "executors", "frontier", "support"],
    "buffers": ["engine", "memory", "executors/stream", "executors", "engine/var_queue", "frontier", "support"],
    "distributed": ["buffers", "engine", "memory", "executors/mpi", "executors/stream", "executors", "engine/var_queue",
                    "frontier", "support"],
}
LIBRARY_ROOTS = ("support", "frontier", "executors", "memory", "engine", "buffers", "distributed")
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".hip"}
# An include of ours: by its path from the repository root, quoted, or through the project's name, as installed.
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<depengine/([^>]+)>)')
LIBRARY = re.compile(r"depengine_library\(([^)]*)\)", re.S)


def layer_of(folder: str):
    """The layer of a folder: the folder itself, with detail/ folders taken as their parent, if LAYERS has it."""
    key = "/".join(p for p in folder.split("/") if p != "detail")
    return key if key in LAYERS else None


def check(root: pathlib.Path):
    violations = []
    checked = 0
    for top in LIBRARY_ROOTS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            folder = rel.rsplit("/", 1)[0]
            layer = layer_of(folder)
            if layer is None:
                violations.append(f"{rel}: folder {folder}/ has no layer in scripts/check_layering.py (LAYERS)")
                continue
            checked += 1
            allowed = {layer, *LAYERS[layer]}
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                match = INCLUDE.match(line)
                target = match and (match.group(1) or match.group(2))
                if not target or "/" not in target:
                    continue  # a system header, or a sibling included by its bare name
                target_layer = layer_of(target.rsplit("/", 1)[0])
                if target_layer is None or target_layer not in allowed:
                    may = ", ".join(LAYERS[layer]) or "nothing of ours"
                    violations.append(f"{rel}:{number}: includes {target}, above its layer ({layer}/ may include: "
                                      f"{may})")
    return checked, violations


def check_targets(root: pathlib.Path):
    """The DEPS of every depengine_library() against LAYERS: (target, folder, deps) per library, then violations."""
    libraries = []
    for top in LIBRARY_ROOTS:
        for cmake in sorted((root / top).rglob("CMakeLists.txt")):
            folder = cmake.parent.relative_to(root).as_posix()
            for call in LIBRARY.findall(cmake.read_text()):
                words = call.split()
                name = words[words.index("NAME") + 1]
                deps = words[words.index("DEPS") + 1:] if "DEPS" in words else []
                libraries.append((name, folder, [d.split("::", 1)[1] for d in deps if d.startswith("depengine::")]))
    folder_of = {name: folder for name, folder, _ in libraries}
    violations = []
    for name, folder, deps in libraries:
        layer = layer_of(folder)
        if layer is None:
            continue  # reported by check()
        for dep in deps:
            dep_layer = layer_of(folder_of.get(dep, ""))
            if dep_layer != layer and dep_layer not in LAYERS[layer]:
                violations.append(f"{folder}/CMakeLists.txt: depengine::{name} links depengine::{dep}, above its "
                                  f"layer ({layer}/ may include: {', '.join(LAYERS[layer]) or 'nothing of ours'})")
    return violations


def main(argv):
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
    checked, violations = check(root)
    violations += check_targets(root)
    for violation in violations:
        print(f"layering: {violation}")
    if violations:
        print(f"layering: {len(violations)} violation(s) in {checked} files")
        return 1
    print(f"layering: {checked} files, every include within its layer")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
