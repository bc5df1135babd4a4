#!/usr/bin/env python3
"""Fails when a crate's source files import each other in a circle (docs/architecture.md).

Each `src/**/*.rs` file is a node; it points at every file it names through `crate::a::b` or
`super::a` paths outside comments and outside its `#[cfg(test)] mod tests` block. A strongly
connected set of two or more files is a circle: printed, and the exit status is 1. Crate-level
arrows are Cargo's to check (a dependency cycle does not build).

Usage: python3 scripts/import-circles.py [WORKSPACE]   (default: the current directory)
"""

import os
import re
import sys

PATH = re.compile(r"\b(crate|super)::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")


def module_file(directory, parts):
    """The file of the longest prefix of `parts` that is a module under `directory`."""
    for k in range(len(parts), 0, -1):
        base = os.path.join(directory, *parts[:k])
        for candidate in (base + ".rs", os.path.join(base, "mod.rs")):
            if os.path.isfile(candidate):
                return candidate
    return None


def own_directory(path):
    """Where a file's child modules live (`mod.rs`, `lib.rs`, `main.rs`: beside it)."""
    stem, _ = os.path.splitext(path)
    if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs"):
        return os.path.dirname(path)
    return stem


def parent_file(path, src):
    """The file of a file's parent module."""
    here = own_directory(path)
    parent_dir = os.path.dirname(here)
    if os.path.abspath(here) == os.path.abspath(src):
        return None
    for candidate in (parent_dir + ".rs", os.path.join(parent_dir, "mod.rs"),
                      os.path.join(parent_dir, "lib.rs"), os.path.join(parent_dir, "main.rs")):
        if os.path.isfile(candidate):
            return candidate
    return None


def code_of(path):
    lines = [l for l in open(path, encoding="utf-8").read().split("\n")
             if not l.lstrip().startswith("//")]
    text = "\n".join(lines)
    cut = text.find("#[cfg(test)]\nmod tests")
    return text if cut < 0 else text[:cut]


def edges(src, path):
    found = set()
    for root, rest in PATH.findall(code_of(path)):
        parts = rest.split("::")
        if root == "crate":
            target = module_file(src, parts)
        else:
            parent = parent_file(path, src)
            if parent is None:
                continue
            target = module_file(os.path.dirname(own_directory(path)), parts) or parent
        if target and os.path.abspath(target) != os.path.abspath(path):
            found.add(os.path.abspath(target))
    return found


def circles(graph):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(100_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    workspace = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    failed = False
    for crate in sorted(os.listdir(workspace)):
        src = os.path.join(workspace, crate, "src")
        if crate in ("target", "fuzz") or not os.path.isdir(src):
            continue
        graph = {}
        for root, _, files in os.walk(src):
            for name in files:
                if name.endswith(".rs"):
                    path = os.path.abspath(os.path.join(root, name))
                    graph[path] = edges(src, path)
        for component in circles(graph):
            failed = True
            names = ", ".join(os.path.relpath(p, workspace) for p in component)
            print(f"import circle in {crate}: {names}")
    if failed:
        sys.exit(1)
    print("no import circles")


if __name__ == "__main__":
    main()
