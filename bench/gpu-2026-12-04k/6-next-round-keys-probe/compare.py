import re,sys
L=[l for l in open(sys.argv[1]).read().splitlines() if l.startswith('S=')]
n=17
runs=[L[i*n:(i+1)*n] for i in range(5)]
def parse(l):
    m=re.search(r'chunk ([0-9.]+) us, combine ([0-9.]+)',l); h=re.search(r'hash (\w+)',l).group(1)
    return l.split(' heads/')[0],float(m.group(1)),h,re.search(r'staged=(\d)',l).group(1), re.search(r'heads/block=\d+ rows/block=\d+',l).group(0)
for i in range(n):
    p=[parse(r[i]) for r in runs]
    same = len({x[2] for x in p})==1
    print(f"{p[0][0][:42]:42s} {p[0][4]:26s} st={p[0][3]} old {p[0][1]:.2f},{p[3][1]:.2f} new {p[1][1]:.2f},{p[4][1]:.2f} unst {p[2][1]:.2f} same={same}")
rest=L[5*n:]
v=len(rest)-14
a,b=rest[:v//2],rest[v//2:v]
print('verify lines',len(a),len(b),'hashes same', all(re.search(r'hash (\w+)',x).group(1)==re.search(r'hash (\w+)',y).group(1) for x,y in zip(a,b)))
import statistics
ta=[float(re.search(r'chunk ([0-9.]+)',x).group(1)) for x in a]; tb=[float(re.search(r'chunk ([0-9.]+)',x).group(1)) for x in b]
print('verify chunk sum old %.1f new %.1f'%(sum(ta),sum(tb)))
pa,pb=rest[v:v+7],rest[v+7:]
for x,y in zip(pa,pb):
    print(x.split(' blocks')[0][:40], re.search(r'pair ([0-9.]+)',x).group(1), re.search(r'pair ([0-9.]+)',y).group(1), re.search(r'hash (\w+)',x).group(1)==re.search(r'hash (\w+)',y).group(1))
