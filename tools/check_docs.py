#!/usr/bin/env python3
"""check_docs.py - every link, file and function the tutorial names must exist, and the docs speak of the suite only.

Run by ctest (label docs, `make test-docs`):  python3 tools/check_docs.py [--root DIR] [FILE.md ...]
Its own test:                                   python3 tools/check_docs.py --self-test

What it reads: docs/*.md, README.md and */README.md (or the Markdown files given on the command line).
What it checks, each failure reported as `file:line: what is wrong`:

1. Links. Every relative Markdown link or image `[text](target)`, reference definition `[id]: target` and HTML
   `href=`/`src=` resolves to a file or folder inside the repository. A `#anchor` on a Markdown file must match one of
   its headings (GitHub's rule: lower case, punctuation dropped, spaces become hyphens, repeats get -1, -2) or an
   explicit `<a id=...>`; `#L10` or `#L10-L20` on any other file must be within its length. Web links are not fetched.
2. File paths. The suite's convention is to name a file by its path from the repository root in backticks, e.g.
   `phase1_naive/naive_cpu.c`. Every backticked path (and every path in a fenced code block that starts with a
   top-level folder, such as the two files of a `diff -u` command) must exist; a glob must match at least one file.
   A bare source file name with no folder (`naive_cpu.c`) must exist somewhere in the tree. `build*/bin/NAME` must
   be an executable the CMake build defines; other paths under a build folder are outputs and are not checked.
3. Functions. Every `name()` in backticks must be defined in the sources: a C/CUDA function with a body or a
   function-like macro, a Python `def`, a shell function, or a CMake function/macro. Functions of the C library, CUDA
   and OpenMP that a chapter may explain are listed in EXTERNAL_FUNCTIONS below. Dotted names (`tl.dot()`) belong to
   other languages' APIs and are not checked.
4. Words about how the project was made. The docs, the READMEs, the tools and every source file speak of the suite
   only: no talk of who worked on it when, or of the machines it was lent. HISTORY_WORDS below lists the phrases; the
   whole tree is read (every text file but data: CSV, logs, images), whichever Markdown files are given.
5. Measured numbers. A Markdown table of measured numbers (a unit such as ms, GFLOP/s, TFLOP/s or GB/s in its text)
   must name the machine it was measured on (a CPU or GPU model, e.g. "AMD EPYC", "H100") and the command that made
   it (in backticks: `tools/headline.sh`, `build/bin/phase3_forward_4d --S 4096`, `make bench`, `python3 ...`; for
   a published figure, the data sheet or whitepaper) in the few lines just before or just after it.

Exit status: 0 when everything resolves, 1 when anything does not, 2 on a usage error.
"""
import argparse
import difflib
import glob
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

# Functions the suite uses but does not define: the C library, OpenMP, the CUDA runtime and device functions.
EXTERNAL_FUNCTIONS = {
    # C library
    "malloc", "calloc", "realloc", "free", "aligned_alloc", "memcpy", "memset", "printf", "fprintf", "snprintf",
    "qsort", "exit", "getopt_long", "clock_gettime", "strtol", "strtoll", "strtod", "fopen", "fclose", "mkdir",
    # C math
    "expf", "exp", "exp2f", "exp2", "logf", "log", "log2f", "log2", "log1pf", "fmaxf", "fmax", "fminf", "fmin",
    "sqrtf", "sqrt", "fabsf", "fabs", "fmaf", "fma", "isnan", "isinf", "isfinite", "rsqrtf",
    # OpenMP
    "omp_set_num_threads", "omp_get_num_threads", "omp_get_max_threads", "omp_get_thread_num", "omp_get_wtime",
    "omp_get_num_procs",
    # CUDA runtime
    "cudaMalloc", "cudaFree", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync",
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaGetErrorString", "cudaEventCreate", "cudaEventRecord", "cudaEventSynchronize", "cudaEventElapsedTime",
    "cudaEventDestroy", "cudaGetDeviceCount", "cudaGetDeviceProperties", "cudaSetDevice", "cudaMemGetInfo",
    "cudaFuncSetAttribute", "cudaFuncGetAttributes", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    # CUDA device code
    "__syncthreads", "__syncwarp", "__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync",
    "__ballot_sync", "__any_sync", "__all_sync", "atomicAdd", "atomicMax", "atomicCAS", "__expf", "__logf",
    "__fdividef", "__ldg", "__launch_bounds__", "__float2half", "__half2float", "min", "max",
    # Python built-ins
    "print", "open", "len", "range",
}
# Headers of the system and of the toolkits, which a chapter may name without the suite containing them.
EXTERNAL_FILES = {
    "math.h", "stdio.h", "stdlib.h", "stdint.h", "stddef.h", "string.h", "time.h", "omp.h", "getopt.h",
    "cuda_runtime.h", "cuda.h", "cuda_fp16.h", "mma.h",
}

SOURCE_EXTS = {".c", ".h", ".cu", ".cuh", ".py", ".sh", ".cmake"}
DOC_EXTS = {".md", ".png", ".svg", ".txt"}
SPECIAL_NAMES = {"CMakeLists.txt", "Makefile"}
C_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "do", "else", "case", "catch",
              "__attribute__", "decltype", "alignof", "_Pragma", "static_assert"}

PATH_TOKEN = re.compile(r"^[A-Za-z0-9_.\-/*]+$")
FUNCTION_SPAN = re.compile(r"^([A-Za-z_]\w*)\(\)$")
BUILD_DIR = re.compile(r"^build(-[\w.\-]+)?$")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SETEXT_UNDERLINE = re.compile(r"^\s{0,3}(=+|-+)\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
LINE_ANCHOR = re.compile(r"^L(\d+)(?:-L(\d+))?$")

# Rule 4: phrases about how the project was made, each with what to write instead. (The patterns are spelled with
# character classes so that this file does not match them itself.)
HISTORY_WORDS = [
    (re.compile(r"\bthe see[d]s\b|\bsee[d]s'|shared/see[d]s", re.IGNORECASE),
     "name the source material as \"the Triton tutorial this suite follows\""),
    (re.compile(r"\ble[n]t (gpu|machine|device|card|h\d+)\b|\bthe le[n]t\b", re.IGNORECASE),
     "name the machine by its model (\"an H100\")"),
    (re.compile(r"\biss[u]es? ?#?\d+|\bthe iss[u]es\b|\bfiled by\b", re.IGNORECASE),
     "say what the code does, not which ticket asked for it"),
    (re.compile(r"\bsess[i]ons?\b", re.IGNORECASE), "say what the suite does, not when it was done"),
    (re.compile(r"\bhelp[e]r (sess[i]ons?|agents?)\b|\b(a|the|another) help[e]r\b(?! (function|macro|kernel)s?\b)",
                re.IGNORECASE), "say what the suite does, not who did it"),
]
DATA_FILE_EXTS = {".png", ".jpg", ".svg", ".pdf", ".npy", ".csv", ".log"}   # rule 4 reads every other text file

# Rule 5: a table of measured numbers, the machine, and the command.
MEASURED_UNIT = re.compile(r"(?<![\w/])(ms|µs|us|GFLOP/s|TFLOP/s|GFLOPS|TFLOPS|GB/s|TB/s|MB/s)(?![\w/])")
MACHINE_NAME = re.compile(r"\b(H100|H200|A100|A10G?|L4|L40S?|V100|T4|B200|GH200|RTX ?\w+|GeForce|Tesla|Quadro|"
                          r"EPYC|Xeon|Ryzen|Threadripper|Core i\d|Apple M\d|Graviton\d?|Neoverse|Grace)\b")
COMMAND_SPAN = re.compile(r"^(build[\w.\-]*/bin/\w+|tools/[\w.\-]+\.(sh|py)|make( \w[\w\-]*)?|python3 \S+|"
                          r"phase\d_\w+( |$)|\.ci/run)")
NUMBER_WITH_UNIT = re.compile(r"\d\s*(ms|µs|us|GFLOP/s|TFLOP/s|GFLOPS|TFLOPS|GB/s|TB/s|MB/s)(?![\w/])")
NUMBER_CELL = re.compile(r"^[~≈]?\d[\d.,]*(\s*[-–/]\s*\d[\d.,]*)*\s*[x%]?$")
DATA_SHEET = re.compile(r"\bdata ?sheet\b|\bwhitepaper\b", re.IGNORECASE)   # a published figure names its source
CONTEXT_LINES = 4


def is_build_dir(path):
    return BUILD_DIR.match(os.path.basename(path)) is not None or os.path.exists(os.path.join(path, "CMakeCache.txt"))


def walk_sources(root):
    """Every file of the source tree, as absolute paths: what git tracks or would track (ignored files, build folders
    and caches left out); without git, a walk that skips build folders and hidden folders other than .ci."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout.decode("utf-8", "replace")
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True,
                             check=True).stdout.decode().strip()
        if os.path.realpath(top) == os.path.realpath(root):
            for name in sorted(set(out.split("\0"))):
                path = os.path.join(root, name)
                if name and os.path.isfile(path):
                    yield path
            return
    except (OSError, subprocess.CalledProcessError):
        pass
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if (not d.startswith(".") or d == ".ci") and d != "__pycache__"
                         and not is_build_dir(os.path.join(folder, d)))
        for name in sorted(files):
            yield os.path.join(folder, name)


# ---------------------------------------------------------------------------------------------------------------
# Definitions in the sources
# ---------------------------------------------------------------------------------------------------------------

def strip_c_comments(text):
    """Removes comments and the contents of string and character literals, keeping the line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def c_definitions(text):
    """Names of functions defined with a body (name(...) {), and of function-like macros."""
    text = strip_c_comments(text)
    names = set(re.findall(r"^\s*#\s*define\s+([A-Za-z_]\w*)\(", text, re.MULTILINE))
    for match in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text):
        name = match.group(1)
        if name in C_KEYWORDS:
            continue
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        rest = re.match(r"\s*(?:(?:const|noexcept|override)\s*|__attribute__\s*\(\(.*?\)\)\s*)*\{", text[i:i + 400],
                        re.DOTALL)
        if rest:
            names.add(name)
    return names


def definitions_in(root, sources):
    """name -> [files that define it], over the C, CUDA, Python, shell and CMake sources."""
    found = {}

    def add(names, path):
        for name in names:
            found.setdefault(name, []).append(os.path.relpath(path, root))

    for path in sources:
        base, ext = os.path.basename(path), os.path.splitext(path)[1]
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        if ext in {".c", ".h", ".cu", ".cuh"}:
            add(c_definitions(text), path)
        elif ext == ".py":
            add(re.findall(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(", text, re.MULTILINE), path)
        elif ext == ".cmake" or base == "CMakeLists.txt":
            add(re.findall(r"^\s*(?:function|macro)\s*\(\s*([A-Za-z_]\w*)", text, re.MULTILINE | re.IGNORECASE), path)
        elif ext == ".sh" or text.startswith("#!") and "sh" in text.split("\n", 1)[0]:
            add(re.findall(r"^\s*(?:function\s+)?([A-Za-z_]\w*)\s*\(\)\s*\{", text, re.MULTILINE), path)
    return found


def executable_targets(sources):
    """Names given to add_executable() in the CMake files: what build/bin/ will hold."""
    names = set()
    for path in sources:
        if os.path.basename(path) == "CMakeLists.txt" or path.endswith(".cmake"):
            with open(path, encoding="utf-8", errors="replace") as f:
                names.update(re.findall(r"add_executable\s*\(\s*([\w.\-]+)", f.read()))
    return names


# ---------------------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------------------

def github_slug(text):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text)                        # HTML tags
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())       # \w keeps letters of every script, digits and _
    return text.replace(" ", "-")


def markdown_lines(path):
    """(line number, text, in_fence) for every line; fence lines themselves count as inside."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    fence = None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            yield number, line, True
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):]:
                fence = None
            yield number, line, True
        else:
            yield number, line, False


_anchor_cache = {}


def anchors_of(path):
    """The anchors GitHub gives a Markdown file's headings, and its explicit <a id> anchors."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    anchors, counts, previous = set(), {}, None
    for _, line, in_fence in markdown_lines(path):
        if in_fence:
            previous = None
            continue
        anchors.update(HTML_ANCHOR.findall(line))
        heading = None
        m = ATX_HEADING.match(line)
        if m:
            heading = m.group(2)
        elif previous and previous.strip() and SETEXT_UNDERLINE.match(line) and not ATX_HEADING.match(previous):
            heading = previous.strip()
        if heading is not None:
            slug = github_slug(heading)
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
        previous = line
    _anchor_cache[path] = anchors
    return anchors


class Checker:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.problems = []
        self.counts = {"links": 0, "paths": 0, "functions": 0}
        self.sources = list(walk_sources(self.root))
        self.definitions = definitions_in(self.root, self.sources)
        self.targets = executable_targets(self.sources)
        relative = [os.path.relpath(path, self.root) for path in self.sources]
        self.top_level = {name.split(os.sep, 1)[0] for name in relative if os.sep in name}
        self.file_names = {}
        for path in self.sources:
            self.file_names.setdefault(os.path.basename(path), []).append(os.path.relpath(path, self.root))

    def fail(self, doc, line, message):
        self.problems.append("%s:%d: %s" % (os.path.relpath(doc, self.root), line, message))

    def inside_root(self, path):
        path = os.path.realpath(path)
        return path == self.root or path.startswith(self.root + os.sep)

    # -- links -------------------------------------------------------------------------------------------------
    def check_link(self, doc, line, target):
        if not target or re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", target) or target.startswith("//"):
            return   # web links, mailto: - not fetched
        self.counts["links"] += 1
        target_path, _, anchor = target.partition("#")
        target_path = urllib.parse.unquote(target_path)
        if target_path.startswith("/"):
            resolved = os.path.join(self.root, target_path.lstrip("/"))
        else:
            resolved = os.path.join(os.path.dirname(doc), target_path) if target_path else doc
        shown = os.path.relpath(os.path.normpath(resolved), self.root)
        if not self.inside_root(resolved):
            self.fail(doc, line, "link '%s' points outside the repository (%s)" % (target, shown))
            return
        if not os.path.exists(resolved):
            self.fail(doc, line, "broken link '%s': %s does not exist%s" % (target, shown, self.suggest_file(resolved)))
            return
        if not anchor:
            return
        if os.path.isdir(resolved):
            self.fail(doc, line, "link '%s' has an anchor, but %s is a folder" % (target, shown))
        elif resolved.endswith(".md"):
            anchors = anchors_of(resolved)
            if urllib.parse.unquote(anchor) not in anchors:
                close = difflib.get_close_matches(anchor, sorted(anchors), n=1)
                hint = " (did you mean #%s?)" % close[0] if close else ""
                self.fail(doc, line, "broken anchor '%s': no heading of %s has the anchor '#%s'%s"
                          % (target, shown, anchor, hint))
        else:
            m = LINE_ANCHOR.match(anchor)
            with open(resolved, encoding="utf-8", errors="replace") as f:
                length = f.read().count("\n") + 1
            if not m:
                self.fail(doc, line, "anchor '#%s' on %s: only #L<n> or #L<n>-L<m> can point into a file that is "
                          "not Markdown" % (anchor, shown))
            elif max(int(m.group(1)), int(m.group(2) or 0)) > length:
                self.fail(doc, line, "link '%s' points past the end of %s (%d lines)" % (target, shown, length))

    def suggest_file(self, resolved):
        name = os.path.basename(resolved.rstrip("/"))
        where = self.file_names.get(name)
        if where:
            return " (did you mean %s?)" % " or ".join(where[:3])
        close = difflib.get_close_matches(name, self.file_names.keys(), n=1, cutoff=0.8)
        return " (did you mean %s?)" % self.file_names[close[0]][0] if close else ""

    # -- file paths --------------------------------------------------------------------------------------------
    def looks_like_path(self, token, in_fence):
        if not PATH_TOKEN.match(token) or token.startswith("-") or token.startswith("/") or "//" in token:
            return False
        first = token.split("/", 1)[0]
        ext = os.path.splitext(token.rstrip("/"))[1]
        if "/" in token:
            if first in self.top_level or BUILD_DIR.match(first) or first == "..":
                return True
            return not in_fence and (ext in SOURCE_EXTS or ext in DOC_EXTS or token.endswith("/"))
        if in_fence:
            return False
        return ext in SOURCE_EXTS or token in SPECIAL_NAMES

    def check_path(self, doc, line, token):
        self.counts["paths"] += 1
        parts = token.split("/")
        if BUILD_DIR.match(parts[0]):
            # A build output. build/bin/NAME must be one of the executables the build defines.
            if len(parts) >= 3 and parts[1] == "bin" and parts[2] and parts[2] not in self.targets:
                close = difflib.get_close_matches(parts[2], sorted(self.targets), n=1)
                hint = " (did you mean %s?)" % close[0] if close else ""
                self.fail(doc, line, "'%s': no CMakeLists.txt defines an executable named '%s'%s"
                          % (token, parts[2], hint))
            return
        if "/" not in token:
            # A bare source file name: it must exist in the tree (better still, name it by its path).
            if token in EXTERNAL_FILES or token in self.file_names:
                return
            if os.path.exists(os.path.join(os.path.dirname(doc), token)):
                return
            self.fail(doc, line, "file '%s' does not exist anywhere in the repository%s"
                      % (token, self.suggest_file(token)))
            return
        bases = [self.root, os.path.dirname(doc)]
        if "*" in token:
            if not any(glob.glob(os.path.join(base, token)) for base in bases):
                self.fail(doc, line, "'%s' matches no file (relative to the repository root or to %s)"
                          % (token, os.path.relpath(os.path.dirname(doc), self.root) or "."))
            return
        for base in bases:
            candidate = os.path.join(base, token)
            if os.path.exists(candidate) and self.inside_root(candidate):
                if token.endswith("/") and not os.path.isdir(candidate):
                    continue
                return
        self.fail(doc, line, "file '%s' does not exist (paths are relative to the repository root)%s"
                  % (token, self.suggest_file(os.path.join(self.root, token))))

    # -- functions ---------------------------------------------------------------------------------------------
    def check_function(self, doc, line, name):
        self.counts["functions"] += 1
        if name in self.definitions or name in EXTERNAL_FUNCTIONS:
            return
        close = difflib.get_close_matches(name, list(self.definitions.keys()), n=1)
        hint = " (did you mean %s(), in %s?)" % (close[0], self.definitions[close[0]][0]) if close else ""
        self.fail(doc, line, "function '%s()' is not defined in any C, CUDA, Python, shell or CMake source%s; "
                  "if it comes from a library, add it to EXTERNAL_FUNCTIONS in tools/check_docs.py" % (name, hint))

    # -- rule 4: words about how the project was made ----------------------------------------------------------
    def check_history_words(self):
        for path in self.sources:
            if os.path.splitext(path)[1].lower() in DATA_FILE_EXTS:
                continue
            with open(path, "rb") as f:
                data = f.read()
            if b"\0" in data[:8192]:
                continue   # a binary file (a fuzz input, an .npy without its extension)
            for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
                for pattern, instead in HISTORY_WORDS:
                    m = pattern.search(line)
                    if m:
                        self.fail(path, number, "'%s' speaks of how the project was made: %s" % (m.group(0), instead))

    # -- rule 5: measured numbers name their machine and command -------------------------------------------------
    def check_tables(self, doc, lines):
        """lines: (number, text, in_fence) of the whole document."""
        i = 0
        while i < len(lines):
            number, text, in_fence = lines[i]
            is_row = not in_fence and text.lstrip().startswith("|")
            if not is_row:
                i += 1
                continue
            j = i
            while j < len(lines) and not lines[j][2] and lines[j][1].lstrip().startswith("|"):
                j += 1
            table = [l[1] for l in lines[i:j]]
            if len(table) >= 2 and re.match(r"^\s*\|?\s*:?-{3,}", table[1]) and self.is_measured(table):
                context = [l[1] for l in lines[max(0, i - CONTEXT_LINES):i]] + [l[1] for l in lines[j:j + CONTEXT_LINES]]
                words = " ".join(context)
                spans = [m.group(2).strip() for m in CODE_SPAN.finditer(words)]
                command = any(COMMAND_SPAN.match(s) for s in spans) or DATA_SHEET.search(words)
                missing = [what for what, ok in (("the machine (a CPU or GPU model)", MACHINE_NAME.search(words)),
                                                 ("the command (in backticks)", command)) if not ok]
                if missing:
                    self.fail(doc, number, "a table of measured numbers must name %s in the %d lines before or "
                              "after it" % (" and ".join(missing), CONTEXT_LINES))
            i = j

    @staticmethod
    def is_measured(table):
        """A unit of time or rate in the table, and below its header a number with a unit or a cell that is only a
        number ("83.1", "14.0 / 18.4", "1.3x")."""
        if not MEASURED_UNIT.search(" ".join(table)):
            return False
        for row in table[2:]:
            if NUMBER_WITH_UNIT.search(row):
                return True
            if any(NUMBER_CELL.match(cell.strip()) for cell in row.strip().strip("|").split("|")):
                return True
        return False

    # -- one document ------------------------------------------------------------------------------------------
    def check_document(self, doc):
        all_lines = list(markdown_lines(doc))
        self.check_tables(doc, all_lines)
        for number, line, in_fence in all_lines:
            if in_fence:
                for word in re.split(r"[\s=:;,()'\"|<>]+", line):
                    word = word.rstrip(".")
                    if word and "/" in word and self.looks_like_path(word, True):
                        self.check_path(doc, number, word)
                continue
            spans = [m.group(2).strip() for m in CODE_SPAN.finditer(line)]
            prose = CODE_SPAN.sub("``", line)
            for target in INLINE_LINK.findall(prose) + HTML_LINK.findall(prose):
                self.check_link(doc, number, target)
            m = REFERENCE_DEF.match(prose)
            if m:
                self.check_link(doc, number, m.group(1))
            for span in spans:
                f = FUNCTION_SPAN.match(span)
                if f:
                    self.check_function(doc, number, f.group(1))
                    continue
                for word in span.split():
                    if self.looks_like_path(word, False):
                        self.check_path(doc, number, word)


def default_documents(root):
    """README.md, */README.md and docs/*.md, among the files of the source tree."""
    result = []
    for path in walk_sources(root):
        parts = os.path.relpath(path, root).split(os.sep)
        if parts == ["README.md"] or len(parts) == 2 and (parts[1] == "README.md" or parts[0] == "docs"
                                                          and parts[1].endswith(".md")):
            result.append(path)
    return sorted(result, key=lambda p: (p.count(os.sep), p))


def run(root, documents, quiet=False):
    checker = Checker(root)
    checker.check_history_words()
    for doc in documents:
        checker.check_document(os.path.realpath(doc))
    if not quiet:
        for problem in checker.problems:
            print(problem)
        c = checker.counts
        if checker.problems:
            print("check_docs: %d problem(s) in %d document(s). Name files by their path from the repository root "
                  "in backticks, functions as `name()`, and link only to files that exist." % (len(checker.problems),
                                                                                              len(documents)))
        else:
            print("check_docs: %d documents, %d links, %d file paths and %d function names checked: all resolve."
                  % (len(documents), c["links"], c["paths"], c["functions"]))
    return checker


# ---------------------------------------------------------------------------------------------------------------
# Self-test: a small tree with one of each mistake; each must be reported, at its line, and nothing else.
# ---------------------------------------------------------------------------------------------------------------

SELF_TEST_FILES = {
    "src/kernel.c": "// a comment that mentions not_a_definition() {\nstatic int helper(int x) { return x; }\n"
                    "void launch(const float *q,\n            float *o) {\n    helper(1);\n}\n"
                    "#define CHECK(x) (x)\n",
    "src/CMakeLists.txt": "add_executable(demo main.c)\n",
    "tools/plot.py": "def plot_times(rows):\n    return rows\n",
    "docs/other.md": "# Other chapter\n\n## The `diff -u` commands\n\ntext\n\nSetext heading\n--------------\n",
    "docs/README.md": "\n".join([
        "# Guide",                                                     # 1
        "Good: [other](other.md), [anchor](other.md#the-diff--u-commands), [setext](other.md#setext-heading).",
        "Good: [self](#guide), `src/kernel.c`, `kernel.c`, `launch()`, `helper()`, `CHECK()`, `plot_times()`.",
        "Good: `build/bin/demo --S 4`, `expf()`, `tl.dot()`, `src/*.c`, [web](https://example.org/x).",
        "Bad link: [missing](missing.md).",                             # 5
        "Bad anchor: [x](other.md#no-such-heading).",                   # 6
        "Bad file: `src/kernel_v2.c`.",                                  # 7
        "Bad function: `launch_v2()`.",                                  # 8
        "Bad target: `build/bin/demo2`.",                                # 9
        "Not a definition: `not_a_definition()`.",                       # 10
        "```sh",
        "diff -u src/kernel.c src/kernel_v3.c",                          # 12
        "```",
        "Bad line anchor: [l](../src/kernel.c#L99).",                    # 14
        "Bad folder: `phase9_missing/`; good folder: `src/`.",           # 15
        "",                                                              # 16
        "| run | median ms |",                                            # 17: no machine, no command
        "|---|---|",
        "| one | 83.1 |",
        "",
        "Some prose.",
        "",
        "More prose.",
        "",
        "",
        "Measured on an H100 with `build/bin/demo --S 4`:",              # 26
        "",
        "| run | TFLOP/s |",                                              # 28: named above, good
        "|---|---|",
        "| one | 21.5 |",
        "",
        "",
        "",
        "",
        "",
        "| file | what it shows |",                                       # 36: no measured number, good
        "|---|---|",
        "| `time.png` | median time in ms against S |",
        "",
        "",
        "",
        "",
        "",
        "Measured with `build/bin/demo --S 4` (no machine named):",      # 44
        "",
        "| S | GFLOP/s |",                                               # 46
        "|---|---|",
        "| 128 | 12.0 |",
        "",
        "",
        "",
        "",
        "",
        "Numbers from " + "the le" + "nt GPU.",                          # 54
        "",
    ]),
    # A source comment with a word about how the project was made (rule 4 reads every source file).
    "src/notes.c": "// As " + "in the se" + "eds, one tile per block.\nint notes;\n",
}
SELF_TEST_EXPECTED = [
    ("docs/README.md:5:", "broken link 'missing.md'"),
    ("docs/README.md:6:", "broken anchor 'other.md#no-such-heading'"),
    ("docs/README.md:7:", "file 'src/kernel_v2.c' does not exist"),
    ("docs/README.md:8:", "function 'launch_v2()' is not defined"),
    ("docs/README.md:9:", "no CMakeLists.txt defines an executable named 'demo2'"),
    ("docs/README.md:10:", "function 'not_a_definition()' is not defined"),
    ("docs/README.md:12:", "file 'src/kernel_v3.c' does not exist"),
    ("docs/README.md:14:", "points past the end of src/kernel.c"),
    ("docs/README.md:15:", "file 'phase9_missing/' does not exist"),
    ("docs/README.md:17:", "must name the machine (a CPU or GPU model) and the command"),
    ("docs/README.md:46:", "must name the machine (a CPU or GPU model) in the"),
    ("docs/README.md:54:", "speaks of how the project was made"),
    ("src/notes.c:1:", "speaks of how the project was made"),
]


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for name, text in SELF_TEST_FILES.items():
            os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        checker = run(root, [os.path.join(root, "docs", "README.md")], quiet=True)
    ok = True
    for where, what in SELF_TEST_EXPECTED:
        hits = [p for p in checker.problems if p.startswith(where) and what in p]
        print("%-4s expected %s %s" % ("ok" if hits else "MISS", where, what))
        ok = ok and bool(hits)
    unexpected = [p for p in checker.problems
                  if not any(p.startswith(w) and t in p for w, t in SELF_TEST_EXPECTED)]
    for p in unexpected:
        print("UNEXPECTED %s" % p)
    ok = ok and not unexpected
    print("check_docs self-test: %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description="Check that the tutorial's links, file paths and function names "
                                                 "exist in the repository.")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                        help="repository root (default: the folder above tools/)")
    parser.add_argument("--self-test", action="store_true", help="check the checker on a tree with known mistakes")
    parser.add_argument("documents", nargs="*", help="Markdown files (default: README.md, */README.md, docs/*.md)")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not os.path.isdir(args.root):
        print("error: --root %s is not a folder" % args.root, file=sys.stderr)
        return 2
    documents = args.documents or default_documents(args.root)
    missing = [d for d in documents if not os.path.isfile(d)]
    if missing:
        print("error: no such Markdown file: %s" % missing[0], file=sys.stderr)
        return 2
    return 1 if run(args.root, documents).problems else 0


if __name__ == "__main__":
    sys.exit(main())
