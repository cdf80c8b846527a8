#!/usr/bin/env python3
"""Fails, listing them, if the files of src/ import each other in a circle.

A node is a file of src/. An edge A -> B is a path in A's code (not in comments or doc
comments) that names an item of B: a `use crate::…`, `use super::…` or `use self::…` tree,
or a `crate::…`/`super::…`/`self::…` path in an expression or a type. A path is resolved to
the deepest module file it names; a name that module only re-exports (`pub use`) is
followed to the file that defines it. Counted everywhere: code under `#[cfg(test)]` or
`#[cfg(loom)]` in a production file counts for that file. Not counted: a module's `mod x;`
declarations and a module's uses of its own submodules (containment: `use child::X` and
`pub use child::X` without `super`/`crate`), so a test module in a file of its own adds
edges only from itself, and a file with only test code in it cannot close a circle unless
a production file imports it.

Usage: python3 .ci/import-cycles.py [src-dir]; prints the graph's size and every circle.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
ROOT = os.path.normpath(ROOT)


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel in (["lib"], ["main"]):
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif text.startswith("r#\"", i):
            j = text.find('"#', i + 3)
            out.append('""')
            i = n if j < 0 else j + 2
        elif text[i] == "'" and i + 2 < n and (text[i + 2] == "'" or text[i + 1] == "\\"):
            j = text.find("'", i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def split_top(s):
    parts, depth, cur = [], 0, ""
    for c in s:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def expand(tree, prefix=()):
    """`a::{b, c::{d as e}}` -> [(('a','b'), 'b'), (('a','c','d'), 'e')]."""
    tree = re.sub(r"\s+", "", tree)
    if "{" in tree and tree.endswith("}"):
        head, body = tree.split("{", 1)
        head = tuple(x for x in head.split("::") if x)
        res = []
        for part in split_top(body[:-1]):
            res += expand(part, prefix + head)
        return res
    name = tree
    alias = None
    if "as" in tree and re.search(r"[A-Za-z0-9_*]as[A-Za-z_]", tree) is None and " as " not in tree:
        pass
    m = re.match(r"^(.*?)(?:as([A-Za-z_][A-Za-z0-9_]*))?$", tree)
    if m and m.group(2) and not m.group(1).endswith("::"):
        name, alias = m.group(1), m.group(2)
    segs = tuple(x for x in name.split("::") if x)
    if segs and segs[-1] == "self":
        segs = segs[:-1]
    path = prefix + segs
    return [(path, alias or (path[-1] if path else ""))]


USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
PATH = re.compile(r"\b((?:crate|super|self)(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")
INLINE_MOD = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")


def inline_mod_spans(code):
    """(start, end, name) of every inline `mod x { … }`, to resolve `super` inside it."""
    spans = []
    for m in INLINE_MOD.finditer(code):
        depth, i = 0, m.end() - 1
        while i < len(code):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        spans.append((m.start(), i, m.group(1)))
    return spans


def scope_at(pos, spans, base):
    inner = [s for s in spans if s[0] <= pos <= s[1]]
    inner.sort()
    return base + tuple(s[2] for s in inner)


files = {}
for d, _, names in os.walk(ROOT):
    for name in names:
        if name.endswith(".rs"):
            p = os.path.join(d, name)
            files[module_of(p)] = p

modules = set(files)
# Modules declared inline in a file (mod tests { … }) belong to that file.
owner = {m: m for m in modules}
codes, reexports = {}, {}
for mod, path in files.items():
    with open(path, encoding="utf-8") as f:
        code = strip_comments(f.read())
    codes[mod] = code
    spans = inline_mod_spans(code)
    for s in spans:
        owner.setdefault(scope_at(s[0] + 1, spans, mod) + (s[2],), mod)


def absolute(segs, scope):
    segs = list(segs)
    if not segs:
        return None
    if segs[0] == "crate":
        base = ()
        segs = segs[1:]
    elif segs[0] in ("super", "self"):
        base = scope
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    return tuple(base) + tuple(segs)


# Re-exports: module -> {name: absolute path}, for names a module only passes on.
for mod, code in codes.items():
    spans = inline_mod_spans(code)
    table = {}
    for m in USE.finditer(code):
        if not m.group(1):
            continue
        scope = scope_at(m.start(), spans, mod)
        for segs, alias in expand(m.group(2)):
            if not segs:
                continue
            if segs[0] in ("crate", "super", "self"):
                target = absolute(segs, scope)
            else:
                target = scope + segs
            if target:
                table[alias] = target
    reexports[mod] = table


def resolve(target, depth=0):
    """The file that defines the item `target` (an absolute path)."""
    for k in range(len(target), -1, -1):
        head = target[:k]
        if head in owner:
            rest = target[k:]
            mod = owner[head]
            if rest and depth < 20 and head in reexports and rest[0] in reexports[head]:
                via = reexports[head][rest[0]] + rest[1:]
                if via != target:
                    return resolve(via, depth + 1)
            return mod
    return None


edges = {}
for mod, code in codes.items():
    spans = inline_mod_spans(code)
    found = set()
    for m in USE.finditer(code):
        scope = scope_at(m.start(), spans, mod)
        for segs, _ in expand(m.group(2)):
            if segs and segs[0] in ("crate", "super", "self"):
                t = absolute(segs, scope)
                if t is not None:
                    found.add(t)
    for m in PATH.finditer(code):
        segs = tuple(re.sub(r"\s+", "", m.group(1)).split("::"))
        t = absolute(segs, scope_at(m.start(), spans, mod))
        if t is not None:
            found.add(t)
    out = set()
    for t in found:
        dst = resolve(t)
        if dst is None or dst == mod:
            continue
        # A module's paths into its own submodules are containment, not imports.
        if dst[: len(mod)] == mod:
            continue
        out.add(dst)
    edges[mod] = out


def name(mod):
    return os.path.relpath(files[mod], os.path.dirname(ROOT))


# Tarjan's strongly connected components; each component of more than one file is a circle.
index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]


def strong(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
        if w not in index:
            strong(w)
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
        comps.append(comp)


sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index:
        strong(v)

cycles = [sorted(c) for c in comps if len(c) > 1]
n_edges = sum(len(e) for e in edges.values())
print(f"import graph of {ROOT}: {len(files)} files, {n_edges} edges")
if not cycles:
    print("no import circle")
    sys.exit(0)
for comp in cycles:
    members = set(comp)
    print(f"circle of {len(comp)} files:")
    for v in comp:
        for w in sorted(edges[v] & members):
            print(f"  {name(v)} -> {name(w)}")
sys.exit(1)
