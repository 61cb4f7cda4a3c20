"""The hottest SASS lines of one Nsight Compute profile, with their top stall reasons.

    ncu -i PROFILE.ncu-rep --page source --csv --print-source sass > source.csv
    python3 bench/ncu_hot.py source.csv [LINES]

Prints the header, the total of warp-stall samples, then the LINES (60)
instructions with the most samples: address, samples, source text and the
three largest `stall_*` counts of each.
"""
import csv
import sys


def main(path, lines=60):
    rows = list(csv.reader(open(path)))
    start = next(i for i, r in enumerate(rows) if 'Source' in r)
    head, rows = rows[start], rows[start + 1:]
    print(head)

    def col(name):
        return next((i for i, h in enumerate(head) if h == name), None)

    samples, src = col('Warp Stall Sampling (All Samples)'), col('Source')
    stalls = [i for i, h in enumerate(head) if h.startswith('stall_') and 'Not Issued' not in h]
    data = [r for r in rows if len(r) == len(head)]
    print('samples', sum(float(r[samples] or 0) for r in data))
    for r in sorted(data, key=lambda r: -float(r[samples] or 0))[:lines]:
        top = sorted(((float(r[i] or 0), head[i]) for i in stalls), reverse=True)[:3]
        print(f"{r[0]:>6} {float(r[samples]):6.0f} {r[src][:60]:60} " + " ".join(f"{h}={v:.0f}" for v, h in top if v))


if __name__ == '__main__':
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 60)
