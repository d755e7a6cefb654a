# dp_tok_pairs.py - the median paired B/A of a dp_ab.patch run (TOK lines on stderr): python3 dp_tok_pairs.py FILE
import sys, statistics as st
# TOK rep i b ns lines -> median paired B/A (time; >1: B slower), B-faster share of pairs
rows=[l.split() for l in open(sys.argv[1]) if l.startswith('TOK')]
d={}
for _,r,i,b,ns in rows: d[(int(r),int(i))]=(int(b),float(ns))
rat=[]
for (r,i),(b,ns) in d.items():
    if i%2==0 and (r,i+1) in d:
        b2,ns2=d[(r,i+1)]
        if b==b2: continue
        A,B=(ns,ns2) if b==0 else (ns2,ns)
        rat.append(B/A)
rat.sort()
print("%s pairs %d median B/A %.4f  B faster in %.0f%%  A med %.3f ms B med %.3f ms"%(sys.argv[1].split('/')[-1], len(rat), st.median(rat), 100*sum(x<1 for x in rat)/len(rat),
  st.median([ns for (b,ns) in d.values() if b==0])/1e6, st.median([ns for (b,ns) in d.values() if b==1])/1e6))
