#!/usr/bin/env python3
"""The engine's import cycle, per file (issue 11): which files form one strongly connected
set when a file depends on every file it names a path in (`crate::a::b`, `use super::..`;
`#[cfg(test)]` modules and comments left out). Lines marked E hold an `impl Engine` block.

    scripts/engine-import-cycle.py [crates/engine/src]
"""
import re,glob,os,sys
root=sys.argv[1] if len(sys.argv)>1 else 'crates/engine/src'
files={}
for f in glob.glob(root+'/**/*.rs',recursive=True):
    rel=os.path.relpath(f,root)[:-3]
    parts=rel.split('/')
    if parts[-1] in('mod','lib'): parts=parts[:-1]
    files['::'.join(parts) or 'lib']=open(f).read()
names=set(files)
def strip_test_mods(s):
    # drop every `#[cfg(test)] [pub(..)] mod NAME { ... }` (brace-matched): test code
    out=[];i=0
    pat=re.compile(r'#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{')
    while True:
        m=pat.search(s,i)
        if not m: out.append(s[i:]); break
        out.append(s[i:m.start()])
        depth=0;j=m.end()-1
        while j<len(s):
            if s[j]=='{': depth+=1
            elif s[j]=='}':
                depth-=1
                if depth==0: break
            j+=1
        i=j+1
    return ''.join(out)
def resolve(path, cur):
    # path like a::b::c ; find longest module prefix
    segs=path.split('::')
    for k in range(len(segs),0,-1):
        cand='::'.join(segs[:k])
        if cand in names: return cand
    return None
g={}
for n,s in files.items():
    s=re.sub(r'//.*','',s)  # a path named in a comment is no dependency
    s=strip_test_mods(s)
    deps=set()
    for m in re.finditer(r'crate::((?:[a-z_0-9]+::)*[A-Za-z_0-9]+)',s):
        r=resolve(m.group(1),n)
        if r: deps.add(r)
    for m in re.finditer(r'use crate::((?:[a-z_0-9]+::)*)\{([^}]*)\}',s):
        pre=m.group(1)
        for x in m.group(2).split(','):
            x=x.strip()
            if x:
                r=resolve(pre+x,n)
                if r: deps.add(r)
    # super::
    par='::'.join(n.split('::')[:-1])
    for m in re.finditer(r'super::((?:[a-z_0-9]+::)*[A-Za-z_0-9]+)',s):
        base=par
        r=resolve((base+'::' if base else '')+m.group(1),n)
        if r: deps.add(r)
    for m in re.finditer(r'use super::\{([^}]*)\}',s):
        for x in m.group(1).split(','):
            x=x.strip()
            if x:
                r=resolve((par+'::' if par else '')+x,n)
                if r: deps.add(r)
    # a child module named by a relative path (`route::Dup` in jobs/migrate/mod.rs)
    for m in re.finditer(r'(?<![:\w])([a-z_][a-z_0-9]*)::', s):
        child=(n+'::' if n!='lib' else '')+m.group(1)
        if child in names: deps.add(child)
    deps.discard(n); deps.discard('lib')
    # a module depending on its own parent's item path resolves to parent: keep
    g[n]=deps
idx={};low={};st=[];on=set();res=[];i=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=i[0];i[0]+=1;st.append(v);on.add(v)
    for w in g[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        c=[]
        while True:
            w=st.pop();on.discard(w);c.append(w)
            if w==v:break
        res.append(c)
for v in sorted(g):
    if v not in idx: sc(v)
for c in res:
    if len(c)>1: print(len(c),sorted(c))
print(len(files),'files')
big=[c for c in res if len(c)>1]
impl={n for n,s in files.items() if re.search(r'impl Engine \{|use crate::engine::\{?[^;]*Engine',s)}
for c in big:
    for t in sorted(c):
        print(('E ' if t in impl else '  ')+t,'->',sorted(d for d in g[t] if d in c))
