"""Per-run totals over the items that give the same verdict and op count in every run, by stage."""
import json, sys
from collections import Counter
def load(p):
    d = {}
    for l in open(p):
        r = json.loads(l); s = r['spec']; d[(s['model_id'], s['task'], s['mode'], s['scenario'])] = r
    return d
import os
base = sys.argv[1] if sys.argv[1].startswith('/') else os.path.dirname(os.path.abspath(__file__))  # the committed runs
names = [n for n in sys.argv[1:] if not n.startswith('/')]
runs = {n: load(f'{base}/{n}/results.jsonl') for n in names}
common = [k for k in runs[names[0]] if all(k in runs[n] for n in names)
          and len({runs[n][k]['verdict'] for n in names}) == 1
          and runs[names[0]][k]['verdict'] in ('full_graph', 'graph_break')
          and len({runs[n][k].get('ops_captured') for n in names}) == 1]
print('items with the same verdict and ops in every run:', len(common), 'of', len(runs[names[0]]))
for n in names:
    st = Counter()
    for k in common:
        for s, v in (runs[n][k].get('stage_s') or {}).items():
            st[s] += v
    tot = sum(runs[n][k]['duration_s'] for k in common)
    print(f"{n:6s} item total {tot:7.1f} s  " + "  ".join(f"{s} {v:6.1f}" for s, v in st.most_common()))
differ = [k for k in runs[names[0]] if k not in common]
for k in differ:
    print('differs:', k, [(runs[n].get(k) or {}).get('verdict') for n in names])
