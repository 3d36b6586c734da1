import json, sys
def load(p):
    d={}
    for l in open(p):
        r=json.loads(l); s=r['spec']; d[(s['model_id'],s['task'],s['mode'],s['scenario'])]=r
    return d
runs={n:load(f'results/speed-gc-ab-cpu/{n}/results.jsonl') for n in sys.argv[1:]}
names=list(runs)
common=[k for k in runs[names[0]] if all(k in runs[n] for n in names) and len({runs[n][k]['verdict'] for n in names})==1 and runs[names[0]][k]['verdict'] in ('full_graph','graph_break') and len({runs[n][k].get('ops_captured') for n in names})==1]
print('items same verdict+ops in all:', len(common))
for n in names:
    tr=sum((runs[n][k].get('stage_s') or {}).get('trace',0) for k in common); tot=sum(runs[n][k]['duration_s'] for k in common)
    print(n, 'trace', round(tr,1), 'item total', round(tot,1))
for k in common: print(k, [round(runs[n][k]['duration_s'],2) for n in names])
