#!/usr/bin/env python3
"""The tree's structure rules (issue 22), checked in CI by scripts/test.sh.

1. No import cycle larger than one file inside any crate. The graph has one
   node per source file (a module, with its inline `mod x { }` blocks) and an
   edge A -> B when A names an item of B by path (`use crate::..`,
   `use super::..`, `crate::x::y` in code). A `pub use` re-export is followed
   to the file that defines the item instead of counting as an edge, so a
   `mod.rs` that only re-exports is not a hub. `#[cfg(test)]` modules are
   left out: tests may reach anywhere.
2. No `.rs` file over MAX_FILE_LINES lines outside tests, benches, fuzz
   targets and generated tables, and no function over MAX_FN_LINES lines.

Usage: scripts/check-structure.py [--verbose]   (exit 1 on a violation)
"""
import os
import re
import sys

MAX_FILE_LINES = 700
MAX_FN_LINES = 150
# Crate source roots: (directory, root file).
CRATES = [
    ("stack/src", "lib.rs"),
    ("io/src", "lib.rs"),
    ("sim/src", "lib.rs"),
    ("ibverbs/src", "lib.rs"),
    ("dpdk-glue/src", "lib.rs"),
    ("pcap-fixtures/src", "lib.rs"),
    ("src", "lib.rs"),
]
# Files exempt from the size rules, with the reason (generated tables).
SIZE_EXEMPT = {
    "pcap-fixtures/src/gen.rs": "the fixture catalogue: one function per generated capture",
}


def strip(text):
    """Source without comments, string and char literals (same line count)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(text, open_idx):
    """Index just past the brace block that opens at text[open_idx] == '{'."""
    depth = 0
    for j in range(open_idx, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def drop_test_modules(code):
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code):
        if m.start() < i:
            continue
        out.append(code[i:m.start()])
        end = block_end(code, m.end() - 1)
        out.append("\n" * code.count("\n", m.start(), end))
        i = end
    out.append(code[i:])
    return "".join(out)


class Crate:
    def __init__(self, root_dir, root_file):
        self.dir = root_dir
        self.files = {}  # module path tuple -> file
        self.code = {}  # module path tuple -> stripped code
        self.children = {}  # module path -> set of child names
        self._load((), os.path.join(root_dir, root_file))

    def _load(self, mod, path):
        with open(path, encoding="utf-8") as f:
            code = drop_test_modules(strip(f.read()))
        self.files[mod] = path
        self.code[mod] = code
        self.children.setdefault(mod, set())
        base = os.path.dirname(path) if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs") else path[:-3]
        for m in re.finditer(r"(?:#\[path\s*=\s*\"[^\"]*\"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            name = m.group(1)
            self.children[mod].add(name)
            for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                if os.path.exists(cand):
                    self._load(mod + (name,), cand)
                    break
        # Inline modules (`mod x { .. }`) stay part of this file's node.

    def reexports(self, mod):
        """name -> absolute path tuple, for `pub use` items of `mod`."""
        res = {}
        for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", self.code.get(mod, "")):
            for path, alias in expand_use(m.group(1)):
                absolute = self.absolute(mod, path)
                if absolute:
                    res[alias] = absolute
        return res

    def absolute(self, mod, path):
        if not path:
            return None
        head = path[0]
        if head == "crate":
            return tuple(path[1:])
        if head == "self":
            return mod + tuple(path[1:])
        if head == "super":
            cur, rest = mod, list(path)
            while rest and rest[0] == "super":
                cur, rest = cur[:-1], rest[1:]
            if rest and rest[0] == "self":
                rest = rest[1:]
            return cur + tuple(rest)
        if head in self.children.get(mod, ()):
            return mod + tuple(path)
        return None  # an extern crate or a prelude name

    def resolve(self, path, seen=None):
        """The module (file node) that defines what `path` names."""
        seen = seen or set()
        best = ()
        for k in range(1, len(path) + 1):
            if tuple(path[:k]) in self.files:
                best = tuple(path[:k])
            else:
                break
        rest = path[len(best):]
        if rest and (best, rest[0]) not in seen:
            seen.add((best, rest[0]))
            target = self.reexports(best).get(rest[0])
            if target is not None:
                return self.resolve(list(target) + list(rest[1:]), seen)
        return best


def expand_use(tree):
    """`a::{b, c::d as e}` -> [(['a','b'], 'b'), (['a','c','d'], 'e')]."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, t):
        t = t.strip()
        if not t:
            return
        # prefix::{a, b::{c, d}}
        brace = t.find("{")
        if brace >= 0:
            head = t[:brace].rstrip(":")
            inner = t[brace + 1:t.rfind("}")]
            newp = prefix + ([s for s in head.split("::") if s] if head else [])
            depth, start = 0, 0
            for j, ch in enumerate(inner + ","):
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                elif ch == "," and depth == 0:
                    walk(newp, inner[start:j])
                    start = j + 1
            return
        alias = None
        if "as" in t and re.search(r"[^:]as[A-Za-z_]", t):
            t, alias = re.split(r"(?<=[A-Za-z0-9_])as(?=[A-Za-z_])", t, maxsplit=1)
        segs = prefix + [s for s in t.split("::") if s]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        if segs:
            out.append((segs, alias or segs[-1]))

    walk([], tree)
    return out


def edges(crate):
    graph = {m: set() for m in crate.files}
    for mod, code in crate.code.items():
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            start = code.rfind("\n", 0, m.start())
            line = code[start + 1:m.start()]
            if re.search(r"\bpub(\([^)]*\))?\s*$", line):
                continue  # re-exports are followed, not counted
            paths += [p for p, _ in expand_use(m.group(1))]
        for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code):
            paths.append(m.group(1).split("::"))
        for p in paths:
            if p and p[0] in ("crate", "self", "super") or (p and p[0] in crate.children.get(mod, ())):
                absolute = crate.absolute(mod, p)
                if absolute is None:
                    continue
                target = crate.resolve(list(absolute))
                if target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def long_functions(path, code):
    out = []
    for m in re.finditer(r"\bfn\s+(\w+)[^;{]*?\{", code):
        # skip `fn` inside a type (fn pointer types end without a body)
        end = block_end(code, m.end() - 1)
        lines = code.count("\n", m.start(), end) + 1
        if lines > MAX_FN_LINES:
            out.append((path, code.count("\n", 0, m.start()) + 1, m.group(1), lines))
    return out


def name(mod):
    return "::".join(mod) or "crate"


def main():
    verbose = "--verbose" in sys.argv
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    bad = 0
    for root_dir, root_file in CRATES:
        if not os.path.exists(os.path.join(root_dir, root_file)):
            continue
        crate = Crate(root_dir, root_file)
        graph = edges(crate)
        if verbose:
            for m in sorted(graph):
                print(f"{root_dir}: {name(m)} -> {', '.join(sorted(name(t) for t in graph[m]))}")
        for comp in cycles(graph):
            bad += 1
            mods = sorted(comp)
            print(f"{root_dir}: import cycle between {len(mods)} files:")
            for m in mods:
                inside = sorted(name(t) for t in graph[m] if t in comp)
                print(f"    {crate.files[m]} ({name(m)}) -> {', '.join(inside)}")
        for mod, path in crate.files.items():
            if path in SIZE_EXEMPT:
                continue
            with open(path, encoding="utf-8") as f:
                n = sum(1 for _ in f)
            if n > MAX_FILE_LINES:
                bad += 1
                print(f"{path}: {n} lines (the rule is at most {MAX_FILE_LINES})")
            for p, line, fn, lines in long_functions(path, crate.code[mod]):
                bad += 1
                print(f"{p}:{line}: fn {fn} is {lines} lines (the rule is at most {MAX_FN_LINES})")
    if bad:
        print(f"check-structure: {bad} violation(s)")
        return 1
    print("check-structure: no import cycle between files, no file or function over the size rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
