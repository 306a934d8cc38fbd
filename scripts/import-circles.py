#!/usr/bin/env python3
"""Import circles between the source files of each crate of the workspace, and AWS, Lambda
or HTTP crates imported by the domain (`make lint`, `make test`).

A file that names `crate::a::b` (in a `use` or in a path) depends on the file of the longest
module prefix that exists (a/b.rs, a/b/mod.rs, a.rs or a/mod.rs). A set of files that depend
on each other in a circle is a room nobody can read in an order; it is reported, and the
exit status is 1. Not counted: a module folder whose mod.rs and its own files use each
other (one room), and unit tests (`#[cfg(test)] mod tests { ... }` to the end of a file).

The domain is shared/src (career-core) but for its adapters: store/ (the tables, their
streams and the secrets at rest) and aws/ (the Lambda runtime, the API boundary, the queues,
the senders, the operator's topic). A domain file that names a crate of ADAPTER_CRATES (in
a `use` or in a path, its unit tests included) is reported, and the exit status is 1.
usage: import-circles.py [WORKSPACE]"""
import os
import re
import sys

DOMAIN_CRATE = "shared"
ADAPTER_FOLDERS = ("store", "aws")
# The AWS SDK (aws_sdk_*, aws_config, aws_types, aws_smithy_*), the Lambda crates, the
# DynamoDB item mapping, and the HTTP clients and types.
ADAPTER_CRATES = re.compile(
    r"(?<![\w:])(aws_sdk_\w+|aws_config|aws_types|aws_smithy_\w+|aws_lambda_events|lambda_\w+|serde_dynamo"
    r"|ureq|reqwest|http|http_body|http_body_util|hyper|hyper_util)::"
)
PATH = re.compile(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")
GROUP = re.compile(r"\buse\s+crate::\{([^}]*)\}")


def module_file(src, parts):
    for n in range(len(parts), 0, -1):
        base = os.path.join(src, *parts[:n])
        for candidate in (base + ".rs", os.path.join(base, "mod.rs")):
            if os.path.isfile(candidate):
                return candidate
    return None


def dependencies(src):
    files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs")]
    graph = {f: set() for f in files}
    for f in files:
        with open(f, errors="replace") as source:
            text = source.read()
        text = re.sub(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{.*", "", text, flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        paths = [m.group(1) for m in PATH.finditer(text)]
        paths += [item.strip() for m in GROUP.finditer(text) for item in m.group(1).split(",")]
        for path in filter(None, paths):
            target = module_file(src, path.split("::"))
            if target and target != f and os.path.basename(target) not in ("lib.rs", "main.rs"):
                graph[f].add(target)
    return graph


def adapter_imports(src):
    """(file, crate) for each domain file of `src` that names an adapter crate."""
    found = []
    for d, dirs, fs in os.walk(src):
        if d == src:
            dirs[:] = [x for x in dirs if x not in ADAPTER_FOLDERS]
        for f in sorted(x for x in fs if x.endswith(".rs")):
            path = os.path.join(d, f)
            with open(path, errors="replace") as source:
                text = re.sub(r"//[^\n]*", "", source.read())
            for crate in sorted({m.group(1) for m in ADAPTER_CRATES.finditer(text)}):
                found.append((path, crate))
    return found


def circles(graph):
    """Tarjan's strongly connected components of more than one file, without recursion."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def one_room(component):
    folders = {os.path.dirname(f) for f in component}
    return len(folders) == 1 and os.path.join(folders.pop(), "mod.rs") in component


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    count = 0
    for d, dirs, fs in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("target", ".git", ".local", "node_modules")]
        if "Cargo.toml" in fs and os.path.isdir(os.path.join(d, "src")):
            for component in circles(dependencies(os.path.join(d, "src"))):
                if not one_room(component):
                    count += 1
                    print("import circle:", ", ".join(os.path.relpath(f, root) for f in component))
    print(f"{count} import circles")
    domain = os.path.join(root, DOMAIN_CRATE, "src")
    imports = adapter_imports(domain) if os.path.isdir(domain) else []
    for path, crate in imports:
        print(f"domain file imports an adapter crate: {os.path.relpath(path, root)} ({crate})")
    print(f"{len(imports)} adapter crate imports in the domain (shared/src but store/ and aws/)")
    return 1 if count or imports else 0


if __name__ == "__main__":
    sys.exit(main())
