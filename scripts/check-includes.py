#!/usr/bin/env python3
"""Include what you use, for the standard headers that compilers stopped bringing in through
others: GCC 13's <string> and <system_error> no longer include <cstdint>, so a file that uses
std::uint64_t and includes only <fstream> builds with GCC 12 and fails with GCC 13 (it did, on
the first GPU machine). Each file that names a symbol of the table must include its header
itself. Run by `make test` (a second; no build): prints FILE:LINE: what is missing, exit 1."""
import re
import subprocess
import sys

# symbol pattern -> the header that declares it
TABLE = [
    (r"\bstd::u?int(8|16|32|64)_t\b|\bstd::u?intptr_t\b|\bstd::u?intmax_t\b|\bU?INT(8|16|32|64)_(MAX|MIN)\b",
     "cstdint"),
]
SOURCES = ("*.cpp", "*.hpp", "*.h", "*.cu", "*.cc")


def files(paths):
    if paths:
        return paths
    out = subprocess.run(["git", "ls-files", *SOURCES], capture_output=True, text=True, check=True)
    return out.stdout.split()


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def main(paths):
    bad = 0
    for path in files(paths):
        try:
            raw = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        code = strip_comments(raw)
        for pattern, header in TABLE:
            m = re.search(pattern, code)
            if not m:
                continue
            if re.search(r"#\s*include\s*<" + re.escape(header) + r">", raw):
                continue
            line = code.count("\n", 0, m.start()) + 1
            print(f"{path}:{line}: uses {m.group(0)} without #include <{header}>")
            bad += 1
    if bad:
        print(f"check-includes: {bad} file(s) to fix: include each header the file uses "
              "(GCC 13 and newer need it)", file=sys.stderr)
        return 1
    print(f"check-includes: {len(files(paths))} files include what they use of the table")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
