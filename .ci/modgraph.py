#!/usr/bin/env python3
"""The module picture of src/ (DESIGN §8): every `crate::`/`super::`/`self::`
path in a file (code, test modules and doc links alike; names the crate root
re-exports count as their defining module) is an arrow from that file's
module to the module it names. Fails if an arrow runs up or sideways between
floors (sync/unwind/stats 1; raw, reclaim 2; latch_tree, addr_index 3;
objects 4; raw and reclaim never name each other, nor do the two
front-ends) or if modules form an import circle. Guide pages (documentation
only) may be named from the crate root.

    python3 .ci/modgraph.py src
"""
import os, re, sys, itertools
root = sys.argv[1] if len(sys.argv) > 1 else 'src'
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)[:-3]
            mod = rel.replace(os.sep, '::')
            if mod.endswith('::mod'): mod = mod[:-5]
            if mod in ('lib',): mod = 'crate'
            files[mod] = open(p).read()
mods = set(files)
def resolve(cur, path):
    parts = path.split('::')
    base = cur.split('::') if cur != 'crate' else []
    # the module of the file itself: for mod.rs files the module is the folder
    if parts[0] == 'crate':
        parts = parts[1:]; cand = []
    elif parts[0] == 'super':
        cand = base[:]
        while parts and parts[0] == 'super':
            cand = cand[:-1]; parts = parts[1:]
    elif parts[0] == 'self':
        cand = base[:]; parts = parts[1:]
    else:
        return None
    best = None
    for i in range(len(parts) + 1):
        m = '::'.join(cand + parts[:i])
        if m in mods: best = m
    return best
# names the crate root re-exports, to the module that defines them
reexp = {}
lib = files.get('crate', '')
for mod_, names in re.findall(r'pub use (\w+)::\{([^}]*)\}', lib) + [(a, b) for a, b in re.findall(r'pub use (\w+)::(\w+);', lib)]:
    for n in re.findall(r'\w+', names):
        reexp[n] = mod_
edges = {}
for m, src in files.items():
    # strip comments except doc links
    code = re.sub(r'//[^\n]*', lambda x: x.group(0) if x.group(0).startswith('//!') or x.group(0).startswith('///') else '', src)
    targets = set()
    for path in re.findall(r'\b((?:crate|super|self)(?:::\w+)+)', code):
        parts = path.split('::')
        if parts[0] == 'crate' and len(parts) > 1 and parts[1] in reexp:
            path = 'crate::' + reexp[parts[1]]
        t = resolve(m, path)
        if t and t != m and not m.startswith(t + '::') and t != 'crate':
            targets.add(t)
    edges[m] = targets
floor = {'sync':1,'unwind':1,'stats':1,'raw':2,'reclaim':2,'latch_tree':3,'addr_index':3,'objects':4,'guide':5}
def top(m): return m.split('::')[0]
viol = []
for m, ts in edges.items():
    for t in ts:
        fm, ft = floor.get(top(m)), floor.get(top(t))
        if fm and ft and top(m) != top(t):
            if ft > fm or (ft == fm and {top(m), top(t)} in ({'raw','reclaim'},{'latch_tree','addr_index'})):
                viol.append((m, t))
print('up or sideways arrows:', len(viol))
for v in sorted(viol): print('  ', v[0], '->', v[1])
# cycles among files within a folder (strongly connected components)
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in edges:
    if v not in idx: sc(v)
print('import circles:', len(sccs))
for s in sccs: print('  ', sorted(s))
sys.exit(1 if viol or sccs else 0)
