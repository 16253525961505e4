#!/usr/bin/env python3
"""The public API of a crate, one line an item, from rustdoc's JSON (nightly).

    python3 .ci/public_api.py target/.../doc/arbor_core.json > crates/arbor-core/public-api.txt

Every path a user can name, from the crate's root: modules, re-exports (under the name they
are exported as), structs with their public fields, enums with their variants, traits with
their items, functions and inherent methods with their signatures (parameter names and
types), constants and type aliases. Trait implementations are left out (derives would drown
the list); what a type implements shows in its docs. The lines are sorted, so a change to the
surface is a readable diff: `.ci/habits.sh` (step `api`) fails when the committed file differs
from what the sources give, and `PUBLIC_API=bless` writes it.
"""
import json
import sys


def ty(t):
    """A type, rendered close to Rust's syntax (enough to see a signature change)."""
    if t is None:
        return "()"
    (kind, v), = t.items()
    if kind == "resolved_path":
        return v["path"] + generic_args(v.get("args"))
    if kind == "primitive":
        return v
    if kind == "generic":
        return v
    if kind == "borrowed_ref":
        life = (v["lifetime"] + " ") if v.get("lifetime") else ""
        return "&" + life + ("mut " if v["is_mutable"] else "") + ty(v["type"])
    if kind == "tuple":
        return "(" + ", ".join(ty(x) for x in v) + ")"
    if kind == "slice":
        return "[" + ty(v) + "]"
    if kind == "array":
        return "[" + ty(v["type"]) + "; " + str(v["len"]) + "]"
    if kind == "impl_trait":
        return "impl " + " + ".join(bound(b) for b in v)
    if kind == "dyn_trait":
        return "dyn " + " + ".join(
            p["trait"]["path"] + generic_args(p["trait"].get("args")) for p in v["traits"]
        )
    if kind == "qualified_path":
        return "<" + ty(v["self_type"]) + ">::" + v["name"]
    if kind == "raw_pointer":
        return "*" + ("mut " if v["is_mutable"] else "const ") + ty(v["type"])
    if kind == "function_pointer":
        sig = v["sig"]
        return "fn(" + ", ".join(ty(x[1]) for x in sig["inputs"]) + ") -> " + ty(sig["output"])
    return kind


def bound(b):
    if "trait_bound" in b:
        t = b["trait_bound"]["trait"]
        return t["path"] + generic_args(t.get("args"))
    if "outlives" in b:
        return b["outlives"]
    return "?"


def generic_args(a):
    if not a:
        return ""
    if "angle_bracketed" in a:
        parts = []
        for x in a["angle_bracketed"]["args"]:
            if "type" in x:
                parts.append(ty(x["type"]))
            elif "lifetime" in x:
                parts.append(x["lifetime"])
            elif "const" in x:
                parts.append(str(x["const"].get("expr", "_")))
        for c in a["angle_bracketed"].get("constraints", []):
            binding = c.get("binding", {})
            if "equality" in binding and "type" in binding["equality"]:
                parts.append(c["name"] + " = " + ty(binding["equality"]["type"]))
            else:
                parts.append(c["name"])
        return "<" + ", ".join(parts) + ">" if parts else ""
    if "parenthesized" in a:
        p = a["parenthesized"]
        out = "(" + ", ".join(ty(x) for x in p["inputs"]) + ")"
        return out + (" -> " + ty(p["output"]) if p.get("output") else "")
    return ""


def param(name, t):
    if name == "self":
        if t == {"generic": "Self"}:
            return "self"
        ref = t.get("borrowed_ref")
        if ref and ref["type"] == {"generic": "Self"}:
            return "&mut self" if ref["is_mutable"] else "&self"
    return name + ": " + ty(t)


def signature(f):
    sig = f["sig"]
    head = "async fn" if f["header"]["is_async"] else "fn"
    params = ", ".join(param(n, t) for n, t in sig["inputs"])
    out = "" if sig["output"] is None else " -> " + ty(sig["output"])
    return head, "(" + params + ")" + out


class Surface:
    def __init__(self, doc):
        self.idx = doc["index"]
        self.root = str(doc["root"])
        self.lines = set()
        self.seen_modules = set()

    def item(self, i):
        return self.idx.get(str(i))

    def walk_module(self, mid, path):
        key = (mid, path)
        if key in self.seen_modules:
            return
        self.seen_modules.add(key)
        m = self.item(mid)
        for i in m["inner"]["module"]["items"]:
            it = self.item(i)
            if it is None or it["visibility"] != "public":
                continue
            self.describe(it, path)

    def describe(self, it, path, name=None):
        (kind, v), = it["inner"].items()
        name = name or it["name"]
        here = f"{path}::{name}"
        if kind == "use":
            target = self.item(v["id"]) if v.get("id") is not None else None
            if v["is_glob"]:
                if target is not None and "module" in target["inner"]:
                    self.walk_module(str(v["id"]), path)
                else:
                    self.lines.add(f"use {path}::* = {v['source']}::*")
                return
            if target is None:
                self.lines.add(f"use {path}::{v['name']} = {v['source']}")
                return
            self.describe(target, path, v["name"])
            return
        if kind == "module":
            self.lines.add(f"mod {here}")
            self.walk_module(str(it["id"]), here)
        elif kind == "struct":
            self.lines.add(f"struct {here}{generic_params(v['generics'])}{exhaustive(it)}")
            fields = v["kind"].get("plain", {}).get("fields", []) if isinstance(v["kind"], dict) else []
            for f in fields:
                fi = self.item(f)
                if fi and fi["visibility"] == "public":
                    self.lines.add(f"field {here}.{fi['name']}: {ty(fi['inner']['struct_field'])}")
            if isinstance(v["kind"], dict) and "tuple" in v["kind"]:
                for n, f in enumerate(v["kind"]["tuple"]):
                    fi = self.item(f) if f is not None else None
                    if fi and fi["visibility"] == "public":
                        self.lines.add(f"field {here}.{n}: {ty(fi['inner']['struct_field'])}")
            self.inherent(v["impls"], here)
        elif kind == "enum":
            self.lines.add(f"enum {here}{generic_params(v['generics'])}{exhaustive(it)}")
            for var in v["variants"]:
                vi = self.item(var)
                if vi:
                    self.lines.add(
                        f"variant {here}::{vi['name']}{variant_shape(self, vi)}{exhaustive(vi)}"
                    )
            self.inherent(v["impls"], here)
        elif kind == "trait":
            self.lines.add(f"trait {here}{generic_params(v['generics'])}")
            for i in v["items"]:
                ti = self.item(i)
                if ti is None:
                    continue
                (tk, tv), = ti["inner"].items()
                if tk == "function":
                    head, sig = signature(tv)
                    self.lines.add(f"trait-{head} {here}::{ti['name']}{sig}")
                else:
                    self.lines.add(f"trait-{tk} {here}::{ti['name']}")
        elif kind == "function":
            head, sig = signature(v)
            self.lines.add(f"{head} {here}{sig}")
        elif kind == "constant":
            self.lines.add(f"const {here}: {ty(v['type'])}")
        elif kind == "static":
            self.lines.add(f"static {here}: {ty(v['type'])}")
        elif kind == "type_alias":
            self.lines.add(f"type {here} = {ty(v['type'])}")
        elif kind == "macro":
            self.lines.add(f"macro {here}")
        else:
            self.lines.add(f"{kind} {here}")

    def inherent(self, impls, here):
        for i in impls:
            im = self.item(i)
            if im is None or im["inner"]["impl"]["trait"] is not None:
                continue
            for m in im["inner"]["impl"]["items"]:
                mi = self.item(m)
                if mi is None or mi["visibility"] != "public":
                    continue
                (mk, mv), = mi["inner"].items()
                if mk == "function":
                    head, sig = signature(mv)
                    self.lines.add(f"{head} {here}::{mi['name']}{sig}")
                elif mk == "assoc_const":
                    self.lines.add(f"const {here}::{mi['name']}")


def exhaustive(it):
    """` #[non_exhaustive]` for a type a user cannot build or match in full."""
    attrs = it.get("attrs") or []
    marked = any("non_exhaustive" in (a if isinstance(a, str) else json.dumps(a)) for a in attrs)
    return " #[non_exhaustive]" if marked else ""


def generic_params(g):
    names = [p["name"] for p in g["params"] if not p["name"].startswith("impl ")]
    return "<" + ", ".join(names) + ">" if names else ""


def variant_shape(s, vi):
    kind = vi["inner"]["variant"]["kind"]
    if kind == "plain":
        return ""
    if "tuple" in kind:
        return "(" + ", ".join(
            ty(s.item(f)["inner"]["struct_field"]) if f is not None and s.item(f) else "_"
            for f in kind["tuple"]
        ) + ")"
    if "struct" in kind:
        return " { " + ", ".join(
            s.item(f)["name"] for f in kind["struct"]["fields"] if s.item(f)
        ) + " }"
    return ""


def main():
    doc = json.load(open(sys.argv[1]))
    s = Surface(doc)
    name = doc["index"][str(doc["root"])]["name"]
    s.walk_module(s.root, name)
    for line in sorted(s.lines):
        print(line)


if __name__ == "__main__":
    main()
