#!/usr/bin/env python3
"""lineage.py - the house rules of the sources, checked (docs/architecture.md explains them).

  lineage.py layers [--root DIR]       the include layering: common/ (the foundation) includes only common/; a lesson
                                       (a phase folder) includes only the foundation and its own phase's headers;
                                       tools/ includes only the foundation; every quoted include names one file of
                                       the tree; no include cycle; and no source branches on the GPU generation
                                       (__CUDA_ARCH__), so that compiling for one generation compiles every line
                                       (CI compiles the CUDA code for the oldest the README promises); and no two
                                       files of the foundation and the lessons define one external function (a
                                       program that links two lessons' libraries would call whichever comes first).
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
ARCH_BRANCH = re.compile(r'^\s*#\s*(?:if|ifdef|ifndef|elif)\b.*__CUDA_ARCH__', re.MULTILINE)
# The definition of a function with external linkage, at the start of a line: a return type, the name, the parameters
# (one level of parentheses inside them), then the body's brace. static functions, templates and device code (whose
# names never reach the linker across files) do not count; a declaration ends with ';' and does not match.
EXTERNAL_DEFINITION = re.compile(r'^(?:extern "C"[ \t]+)?(?!static\b|typedef\b|struct\b|return\b|else\b|template\b|'
                                 r'__device__|__global__|__host__)(?:const[ \t]+)?[A-Za-z_]\w*[ \t*]+(?:\w+[ \t*]+)*?'
                                 r'(\w+)[ \t]*\((?:[^;{}()]|\([^()]*\))*\)\s*\{', re.MULTILINE)
# Files of which the build compiles one or the other, never both: they define the same functions on purpose.
ALTERNATIVES = [{os.path.join('common', 'fa_gpu.cu'), os.path.join('common', 'fa_gpu_none.c')}]


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
    problems, edges, definers = [], {}, {}
    for f in files:
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as handle:
            text = handle.read()
        layer, phase = layer_of(f)
        edges[f] = []
        if layer in ('foundation', 'lesson') and f.endswith(('.c', '.cu')):
            for name in EXTERNAL_DEFINITION.findall(text):
                if name != 'main':
                    definers.setdefault(name, set()).add(f)
        if ARCH_BRANCH.search(text):
            problems.append('%s: branches on __CUDA_ARCH__; a kernel that needs a newer GPU says so at run time '
                            '(the driver checks the compute capability) and compiles for every generation' % f)
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
    for name, where in sorted(definers.items()):
        if len(where) > 1 and where not in ALTERNATIVES:
            problems.append('%s is defined in %s: a program that links both libraries calls one of them without a '
                            'word; give each its own name' % (name, ' and '.join(sorted(where))))
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


# --- The lineage manifest ------------------------------------------------------------------------------------------
MANIFEST = 'lineage.tsv'
COLUMNS = ['derived', 'base', 'feature', 'budget', 'table', 'row']


def read_manifest(root):
    """The manifest's rows as dicts; problems for malformed lines."""
    rows, problems = [], []
    path = os.path.join(root, MANIFEST)
    if not os.path.exists(path):
        return rows, ['%s is missing' % MANIFEST]
    with open(path, encoding='utf-8') as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip('\n')
            if not line or line.startswith('#'):
                continue
            fields = line.split('\t')
            if len(fields) != len(COLUMNS) or not fields[3].isdigit():
                problems.append('%s:%d: want %d tab-separated fields (%s), the budget a number' %
                                (MANIFEST, number, len(COLUMNS), ', '.join(COLUMNS)))
                continue
            row = dict(zip(COLUMNS, fields))
            row['budget'] = int(row['budget'])
            row['line'] = number
            rows.append(row)
    return rows, problems


def read_lines(root, path):
    with open(os.path.join(root, path), encoding='utf-8', errors='replace') as handle:
        return handle.read().splitlines()


def diff_counts(root, base, derived):
    """(added, removed, code lines changed) of `diff -u base derived`; code lines are those that are neither blank
    nor a comment alone."""
    added = removed = code = 0
    for line in difflib.unified_diff(read_lines(root, base), read_lines(root, derived), lineterm='', n=3):
        if line.startswith(('+++', '---', '@@')):
            continue
        if line.startswith(('+', '-')):
            if line[0] == '+':
                added += 1
            else:
                removed += 1
            text = line[1:].strip()
            if text and not text.startswith(('//', '/*', '*')):
                code += 1
    return added, removed, code


def check_lineage(root):
    rows, problems = read_manifest(root)
    derived_seen = set()
    for row in rows:
        where = '%s:%d' % (MANIFEST, row['line'])
        for key in ('derived', 'base'):
            if not os.path.exists(os.path.join(root, row[key])):
                problems.append('%s: %s %s is missing' % (where, key, row[key]))
        if row['derived'] in derived_seen:
            problems.append('%s: %s is listed twice (a derived file has one base)' % (where, row['derived']))
        derived_seen.add(row['derived'])
        if problems and problems[-1].startswith(where):
            continue
        added, removed, _ = diff_counts(root, row['base'], row['derived'])
        row['changed'] = added + removed
        if row['changed'] > row['budget']:
            problems.append('%s: %s changes %d lines against its base %s, over its budget of %d: carry the base\'s '
                            'change over, or split the feature' % (where, row['derived'], row['changed'], row['base'],
                                                                  row['budget']))
    # Which derived files a changed base pulled past budget: grouped by base, so the fix is carried to each.
    over = {}
    for row in rows:
        if row.get('changed', 0) > row['budget']:
            over.setdefault(row['base'], []).append(row['derived'])
    for base, derived in sorted(over.items()):
        problems.append('base %s: its derived files over budget: %s' % (base, ', '.join(derived)))
    return rows, problems


# --- The docs' diff tables, between <!-- lineage:TABLE --> and <!-- /lineage --> -----------------------------------
MARKER = re.compile(r'(<!-- lineage:([\w-]+) -->\n)(.*?)(<!-- /lineage -->)', re.DOTALL)
DOC_SUFFIXES = ('.md',)


def render_table(root, rows, table):
    """The table of one name: a row per label, the CPU file's diff and the CUDA file's side by side."""
    lines = ['| step | diff | changed lines (+added -removed): all / code only, CPU | CUDA |', '|---|---|---|---|']
    labels = []
    for row in rows:
        if row['table'] == table and row['row'] not in labels:
            labels.append(row['row'])
    if not labels:
        return None
    for label in labels:
        cells, command = {}, ''
        for row in rows:
            if row['table'] != table or row['row'] != label:
                continue
            for suffix in ('_cpu.c', '_cuda.cu'):
                base, derived = row['base'] + suffix, row['derived'] + suffix
                if os.path.exists(os.path.join(root, derived)) and os.path.exists(os.path.join(root, base)):
                    added, removed, code = diff_counts(root, base, derived)
                    cells[suffix] = '+%d -%d / %d' % (added, removed, code)
                    if suffix == '_cpu.c':
                        command = '`diff -u %s %s`' % (base, derived)
        lines.append('| %s | %s | %s | %s |' % (label, command, cells.get('_cpu.c', ''), cells.get('_cuda.cu', '')))
    return '\n'.join(lines) + '\n'


def docs_files(root):
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith(('.', 'build'))]
        found += [os.path.join(directory, f) for f in files if f.endswith(DOC_SUFFIXES)]
    return sorted(found)


def check_docs(root, write):
    rows, problems = read_manifest(root)
    # the manifest lists a file per language pair: expand to the two files for the tables
    pairs = []
    for row in rows:
        stem_d, stem_b = re.sub(r'_(cpu\.c|cuda\.cu)$', '', row['derived']), re.sub(r'_(cpu\.c|cuda\.cu)$', '', row['base'])
        pairs.append(dict(row, derived=stem_d, base=stem_b))
    # one entry per (table, label, stem)
    unique, seen = [], set()
    for row in pairs:
        key = (row['table'], row['row'], row['derived'])
        if key not in seen:
            seen.add(key)
            unique.append(row)
    tables_used = 0
    for path in docs_files(root):
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
        def fill(match):
            nonlocal tables_used
            table = render_table(root, unique, match.group(2))
            if table is None:
                problems.append('%s: table lineage:%s has no rows in %s' % (os.path.relpath(path, root), match.group(2), MANIFEST))
                return match.group(0)
            tables_used += 1
            return match.group(1) + table + match.group(4)
        new = MARKER.sub(fill, text)
        if new != text:
            if write:
                with open(path, 'w', encoding='utf-8') as handle:
                    handle.write(new)
            else:
                problems.append('%s: a lineage table is stale (tools/lineage.py docs --write regenerates it)' %
                                os.path.relpath(path, root))
    return problems, tables_used


def self_test():
    """Each check on a small tree with one mistake of each kind: every mistake must be found."""
    failures = []
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), 'w', encoding='utf-8') as handle:
                handle.write(text)
        write('common/fa_base.h', '#include "lesson.h"\n')                      # the foundation points up
        write('phase1_a/lesson.h', '#include "fa_base.h"\n')                   # ... and so a cycle
        write('phase2_b/kernel_cpu.c', '#include "lesson.h"\nint a;\nint b;\nint c;\n')   # another phase's header
        write('phase1_a/kernel_cpu.c', 'int a;\n')
        write('tools/tool.c', '#include "lesson.h"\n#include "nowhere.h"\n')    # tools above the foundation; no file
        write('phase1_a/kernel_cuda.cu', '#if __CUDA_ARCH__ >= 800\nint a;\n#endif\n')    # a branch on the GPU
        write('phase1_a/step_cuda.cu', 'extern "C" void flash_step(const int *x,\n                int n) {\n}\n')
        write('phase2_b/step_cpu.c', 'void flash_step(const int *x, int n) { (void)x; }\n')    # ... defined twice
        problems, _, _ = check_layers(root)
        for want in ('the foundation includes', 'include cycle', 'includes phase1_a/lesson.h, a header of another',
                     'tools/ includes', 'names no file', 'phase1_a/kernel_cuda.cu: branches on __CUDA_ARCH__',
                     'flash_step is defined in phase1_a/step_cuda.cu and phase2_b/step_cpu.c'):
            if not any(want in p for p in problems):
                failures.append('layers: not found: ' + want)
        write(MANIFEST, 'phase2_b/kernel_cpu.c\tphase1_a/kernel_cpu.c\tthree ints\t2\tt\tr\n'
                        'phase2_b/gone_cpu.c\tphase1_a/kernel_cpu.c\tnothing\t9\tt\tr\n')
        _, problems = check_lineage(root)
        for want in ('over its budget of 2', 'derived phase2_b/gone_cpu.c is missing',
                     'base phase1_a/kernel_cpu.c: its derived files over budget: phase2_b/kernel_cpu.c'):
            if not any(want in p for p in problems):
                failures.append('check: not found: ' + want)
        write('docs/a.md', 'text\n<!-- lineage:t -->\n| stale |\n<!-- /lineage -->\n')
        problems, _ = check_docs(root, write=False)
        if not any('stale' in p for p in problems):
            failures.append('docs: a stale table was not found')
    for f in failures:
        print('error: self-test: ' + f)
    print('%s' % ('FAIL' if failures else 'self-test: every planted mistake found'))
    return 1 if failures else 0


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
    if args.command == 'check':
        rows, problems = check_lineage(root)
        for p in problems:
            print('error: ' + p)
        print('%s: %d derived files' % ('FAIL' if problems else 'lineage holds', len(rows)))
        return 1 if problems else 0
    if args.command == 'docs':
        problems, n = check_docs(root, args.write)
        for p in problems:
            print('error: ' + p)
        print('%s: %d generated tables' % ('FAIL' if problems else ('written' if args.write else 'tables current'), n))
        return 1 if problems else 0
    return self_test()


if __name__ == '__main__':
    sys.exit(main())
