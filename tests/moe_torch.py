# tests/moe_torch.py: micropp's mixture-of-experts layers (--experts, moe.c) against the same model in
# PyTorch, written from docs/experts.md's conventions: the router's softmax, top k (larger first, the lower
# index on a tie) with gates renormalised, capacity ceil(cf x rows x k / E) per group filled in row
# order, a row with nothing kept passed through, Switch's aux loss per group weighing its rows. Both start
# from micropp's weights (its counter-based RNG rewritten over numpy) and read the same rows (.npy), train
# N steps with Adam; the losses of every step and the final weights (micropp's --save) must agree.
# Usage: moe_torch.py MICROPP TMPDIR [-n RANKS] [--group ROWS] [MICROPP ARGS...] (a layout's micro-batch
# rows are its routing group: --group says how many); prints one JSON line.
import glob, json, math, struct, subprocess, sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(json.dumps({"skipped": "no PyTorch for %s: %s" % (sys.executable, e)}))
    sys.exit(0)

micropp, tmp, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
L, D, H, C, B, STEPS, SEED, LR = 4, 12, 16, 3, 64, 6, 7, 0.01
E, K, CF, AUX, EVERY = 4, 2, 1.0, 0.05, 1
G = B  # the routing group: a micro-batch's rows ("--group G" here says what the layout's are)
if "--group" in extra:
    i = extra.index("--group")
    G, extra = int(extra[i + 1]), extra[:i] + extra[i + 2:]
launcher = []
if "-n" in extra:  # "-n N": run under mpiexec
    i = extra.index("-n")
    launcher, extra = ["mpiexec", "-n", extra[i + 1]], extra[:i] + extra[i + 2:]


def mix64(x):  # base/data.h's splitmix64 finaliser, on uint64 arrays (wrapping as C does)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def rng_key(a, b, c):
    return mix64(mix64(mix64(np.uint64(a)) ^ np.uint64(b)) ^ np.uint64(c))


def uniform(key, n, fan_in):  # nn.Linear's range U(-1/sqrt(in), 1/sqrt(in)) from a key
    u = (mix64(key ^ mix64(np.arange(n, dtype=np.uint64))) >> np.uint64(40)).astype(np.float64) / 16777216.0
    return (np.float32(2) * u.astype(np.float32) - np.float32(1)) * (np.float32(1) / np.sqrt(np.float32(fan_in)))


def dense(l, fan_in, fan_out):  # model.c's init_layer_host (RNG_PARAM = 1)
    return uniform(rng_key(SEED, 1, 2 * l), fan_in * fan_out, fan_in).reshape(fan_out, fan_in), \
        uniform(rng_key(SEED, 1, 2 * l + 1), fan_out, fan_in)


def expert(l, e):  # moe.c's moe_init_host (RNG_EXPERT = 5)
    return uniform(rng_key(SEED, 5, (l << 32) + 2 * e), H * H, H).reshape(H, H), \
        uniform(rng_key(SEED, 5, (l << 32) + 2 * e + 1), H, H)


def is_moe(l):
    return l >= 1 and l % EVERY == 0


rs = np.random.RandomState(3)
X = rs.randn(B, D).astype(np.float32) * 2
y = rs.randint(0, C, size=B).astype(np.int32)
np.save(tmp + "/x.npy", X)
np.save(tmp + "/y.npy", y)
save = tmp + "/moe_ck"
cmd = launcher + [micropp, "train", "--data", tmp + "/x.npy", "--labels", tmp + "/y.npy", "--layers", str(L),
                  "--inputs", str(D), "--hidden", str(H), "--classes", str(C), "--batch", str(B), "--steps",
                  str(STEPS), "--lr", str(LR), "--seed", str(SEED), "--experts", str(E), "--top-k", str(K),
                  "--capacity-factor", str(CF), "--aux-loss", str(AUX), "--log-every", "0", "--eval-samples", "0",
                  "--json", "--save", save] + extra
out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
if out.returncode != 0:
    print(json.dumps({"error": "micropp exit %d: %s" % (out.returncode, out.stderr.strip()[:300])}))
    sys.exit(0)
mine = json.loads(out.stdout.strip().splitlines()[-1])

torch.set_num_threads(1)
P = {}
for l in range(L):
    if is_moe(l):
        P["layers.%d.router.weight" % l], P["layers.%d.router.bias" % l] = dense(l, H, E)
        for e in range(E):
            P["layers.%d.experts.%d.weight" % (l, e)], P["layers.%d.experts.%d.bias" % (l, e)] = expert(l, e)
    else:
        P["layers.%d.weight" % l], P["layers.%d.bias" % l] = dense(l, D if l == 0 else H, H)
P["head.weight"], P["head.bias"] = dense(L, H, C)
T = {k: torch.tensor(v, requires_grad=True) for k, v in P.items()}


def moe_layer(l, x):  # groups of G rows, each routed on its own; returns y and sum_g (rows_g / B) aux_g
    ys, aux = [], 0.0
    Wr, br = T["layers.%d.router.weight" % l], T["layers.%d.router.bias" % l]
    We = torch.stack([T["layers.%d.experts.%d.weight" % (l, e)] for e in range(E)])
    be = torch.stack([T["layers.%d.experts.%d.bias" % (l, e)] for e in range(E)])
    for g0 in range(0, x.shape[0], G):
        xg = x[g0:g0 + G]
        n = xg.shape[0]
        p = torch.softmax(xg @ Wr.T + br, dim=1)
        idx = torch.sort(p.detach(), dim=1, descending=True, stable=True).indices[:, :K]
        pk = p.gather(1, idx)
        gate = pk / pk.sum(1, keepdim=True)
        cap, fill = math.ceil(CF * n * K / E), [0] * E
        keep = torch.zeros(n, K)
        for r in range(n):
            for j in range(K):
                e = int(idx[r, j])
                keep[r, j] = 1.0 if fill[e] < cap else 0.0
                fill[e] += 1
        f = torch.tensor(fill, dtype=torch.float32) / (n * K)
        aux = aux + (n / B) * AUX * E * (f * p.mean(0)).sum()
        h = torch.relu(torch.einsum("rh,eoh->reo", xg, We) + be)  # every expert on every row: [n, E, H]
        hk = h.gather(1, idx.unsqueeze(2).expand(n, K, H))
        yg = (keep.unsqueeze(2) * gate.unsqueeze(2) * hk).sum(1)
        through = (keep.sum(1) == 0).unsqueeze(1)
        ys.append(torch.where(through, xg, yg))
    return torch.cat(ys), aux


opt = torch.optim.Adam(list(T.values()), lr=LR)
xt, yt = torch.from_numpy(X), torch.from_numpy(y).long()
losses = []
for step in range(STEPS):
    opt.zero_grad()
    a, aux = xt, 0.0
    for l in range(L):
        if is_moe(l):
            a, aux_l = moe_layer(l, a)
            aux = aux + aux_l
        else:
            a = torch.relu(a @ T["layers.%d.weight" % l].T + T["layers.%d.bias" % l])
    loss = torch.nn.functional.cross_entropy(a @ T["head.weight"].T + T["head.bias"], yt)
    (loss + aux).backward()
    losses.append(loss.item())
    opt.step()

saved = {}
for path in glob.glob(save + "/*.safetensors"):  # micropp's final weights, every stage's file
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    for name, t in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__" or name.startswith("optim"):
            continue
        b0, b1 = t["data_offsets"]
        saved[name] = np.frombuffer(raw[8 + n + b0:8 + n + b1], dtype=np.float32)
weights_rel = max(float(np.max(np.abs(saved[k] - T[k].detach().numpy().ravel())) /
                        (np.max(np.abs(T[k].detach().numpy())) + 1e-30)) for k in T)
per = sorted(((float(np.max(np.abs(saved[k] - T[k].detach().numpy().ravel())) / (np.max(np.abs(T[k].detach().numpy())) + 1e-30)), k) for k in T), reverse=True)[:3]
loss_rel = max(abs(p - q) / abs(q) for p, q in zip(mine["losses"], losses))
print(json.dumps({"loss_rel": loss_rel, "weights_rel": weights_rel, "tensors": len(saved), "expected": len(T),
                  "group": G, "worst": per, "losses": mine["losses"], "torch_losses": losses}))
