# Writes a CUDA source (.cu) as C++ for the CPU emulator (emulator.hpp): each launch,
# KERNEL<<<grid, block[, shared[, stream]]>>>(args), becomes
# ::wick_emu::launch(grid, block, shared, stream, KERNEL, args), on as many lines as it had, so
# that the compiler's and the sanitizers' line numbers are the source's; nvcc's unrolling hints
# (#pragma unroll) become empty lines: the host compiler does not know them, or fails them. A
# device header the source includes (cuda/NAME.cuh) is written in its place the same way.
#   python3 rewrite_launches.py SOURCE.cu OUTPUT.cpp
import os
import sys


def split_top(text):
    """text split at its commas outside brackets."""
    parts, depth, cur = [], 0, ''
    for ch in text:
        if ch in '([{<':
            depth += 1
        elif ch in ')]}>':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    return [p.strip() for p in parts + [cur]]


def rewrite(src, path):
    out = src
    while (i := out.find('<<<')) >= 0:
        # The kernel before it: a name, with its template arguments if any.
        k = i
        while out[k - 1].isspace():
            k -= 1
        if out[k - 1] == '>':
            depth = 0
            while True:
                k -= 1
                if out[k] == '>':
                    depth += 1
                elif out[k] == '<':
                    depth -= 1
                    if depth == 0:
                        break
        while out[k - 1].isalnum() or out[k - 1] in '_:':
            k -= 1
        kernel = out[k:i].strip()
        j = out.index('>>>', i)
        config = split_top(out[i + 3:j])
        p = j + 3
        while out[p].isspace():
            p += 1
        if out[p] != '(' or not kernel:
            sys.exit('%s: a launch this script cannot read, at offset %d' % (path, i))
        depth, q = 0, p
        while True:
            if out[q] == '(':
                depth += 1
            elif out[q] == ')':
                depth -= 1
                if depth == 0:
                    break
            q += 1
        args = ' '.join(out[p + 1:q].split())
        config += ['0', 'nullptr'][len(config) - 2:]
        call = '::wick_emu::launch(%s, %s%s)' % (
            ', '.join(config), kernel, ', ' + args if args else '')
        out = out[:k] + call + '\n' * out[k:q + 1].count('\n') + out[q + 1:]
    return out


def emulated(path):
    """path's text for the emulator: its launches rewritten, its unrolling hints (and a
    header's #pragma once) dropped, and the device headers it includes (#include
    "cuda/NAME.cuh", beside it) written in place the same way, each under #line directives
    that keep its own line numbers."""
    with open(path) as f:
        lines = f.read().split('\n')
    out = []
    for n, line in enumerate(lines, 1):
        words = line.split()
        if line.strip().startswith('#pragma unroll') or line.strip() == '#pragma once':
            out.append('')
        elif len(words) == 2 and words[0] == '#include' and words[1].endswith('.cuh"'):
            header = os.path.join(os.path.dirname(path), os.path.basename(words[1].strip('"')))
            out.append('#line 1 "%s"\n%s\n#line %d "%s"' % (header, emulated(header), n + 1, path))
        else:
            out.append(line)
    return rewrite('\n'.join(out), path)


source, output = sys.argv[1], sys.argv[2]
with open(output, 'w') as f:
    f.write('#include "emulator.hpp"\n#line 1 "%s"\n%s' % (source, emulated(source)))
