#!/usr/bin/env python3
"""lineage.py - the house rules of the sources, checked (docs/architecture.md explains them).

  lineage.py layers [--root DIR]       the include layering: common/ (the foundation) includes only common/; a lesson
                                       (a phase folder) includes only the foundation and its own phase's headers;
                                       tools/ includes only the foundation; every quoted include names one file of
                                       the tree; no include cycle.
  lineage.py check [--root DIR]        every derived file of lineage.tsv exists, and its diff against its base stays
                                       within its budget (changed lines: the + and - lines of `diff -u`).
  lineage.py docs [--root DIR] [--write]   the diff tables between <!-- lineage:... --> markers in the docs are
                                       what the manifest gives; --write regenerates them.
  lineage.py self-test                 each check, on a small tree with one mistake of each kind, must fail.

Python's standard library only. Exit status 0 when the rules hold, 1 when one is broken (every finding on one line).
"""
import argparse
import difflib
import os
import re
import sys
import tempfile

SOURCE_SUFFIXES = ('.c', '.h', '.cu', '.cuh')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def source_files(root):
    """Every C/CUDA source of the tree, as paths relative to root (build folders and .git left out)."""
    found = []
    for directory, subdirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        subdirs[:] = [d for d in subdirs if not d.startswith(('.', 'build'))]
        for name in files:
            if name.endswith(SOURCE_SUFFIXES):
                found.append(os.path.normpath(os.path.join(rel_dir, name)))
    return sorted(found)


def layer_of(path):
    """('foundation' | 'lesson' | 'tools' | 'tests', the phase folder for a lesson)."""
    top = path.split(os.sep)[0]
    if top == 'common':
        return 'foundation', None
    if top.startswith('phase'):
        return 'lesson', top
    return top, None


def check_layers(root):
    files = source_files(root)
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    problems, edges = [], {}
    for f in files:
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as handle:
            text = handle.read()
        layer, phase = layer_of(f)
        edges[f] = []
        for name in INCLUDE.findall(text):
            here = os.path.normpath(os.path.join(os.path.dirname(f), name))
            candidates = [here] if here in files else by_name.get(os.path.basename(name), [])
            if len(candidates) != 1:
                problems.append('%s: #include "%s" names %s' % (f, name, 'no file of the tree' if not candidates
                                                                   else 'several files: ' + ', '.join(candidates)))
                continue
            target = candidates[0]
            edges[f].append(target)
            target_layer, target_phase = layer_of(target)
            if target_layer == 'foundation':
                continue
            if layer == 'foundation':
                problems.append('%s: the foundation includes %s, which is above it' % (f, target))
            elif layer == 'lesson' and target_phase != phase:
                problems.append('%s: a lesson of %s includes %s, a header of another layer' % (f, phase, target))
            elif layer == 'tools':
                problems.append('%s: tools/ includes %s; tools use the foundation only' % (f, target))
    # No cycle: a depth-first walk that meets a file still open has found one.
    state = {}

    def visit(node, stack):
        state[node] = 'open'
        for nxt in edges.get(node, []):
            if state.get(nxt) == 'open':
                cycle = stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
                problems.append('include cycle: ' + ' -> '.join(cycle))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 'done'

    for f in files:
        if f not in state:
            visit(f, [f])
    return problems, len(files), sum(len(v) for v in edges.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('command', choices=['layers', 'check', 'docs', 'self-test'])
    parser.add_argument('--root', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    parser.add_argument('--write', action='store_true')
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if args.command == 'layers':
        problems, n_files, n_edges = check_layers(root)
        for p in problems:
            print('error: ' + p)
        print('%s: %d sources, %d includes' % ('FAIL' if problems else 'layers hold', n_files, n_edges))
        return 1 if problems else 0
    return 2


if __name__ == '__main__':
    sys.exit(main())
