# tests/clip_torch.py: micropp's --clip-grad against PyTorch's clip_grad_norm_ on the monolith. The
# model starts from micropp's own weights (its counter-based RNG, base/data.h, rewritten here over numpy)
# and both read the same rows (.npy files), so each step's loss and gradient norm must agree within float
# noise. Usage: clip_torch.py MICROPP TMPDIR adam|sgd; prints one JSON line: the worst relative
# differences of the losses and of the norms, and the steps each side clipped (a NORM chosen so that
# some steps clip and some do not).
import json, subprocess, sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(json.dumps({"skipped": "no PyTorch for %s: %s" % (sys.executable, e)}))
    sys.exit(0)

micropp, tmp, optim = sys.argv[1], sys.argv[2], sys.argv[3]
L, D, H, C, B, STEPS, SEED = 4, 12, 16, 3, 64, 8, 7
LR, norm = {"adam": (0.01, 0.1), "sgd": (0.5, 0.055)}[optim]
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(x):  # base/data.h's splitmix64 finaliser, on uint64 arrays (wrapping as C does)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def rng_key(a, b, c):
    return mix64(mix64(mix64(np.uint64(a)) ^ np.uint64(b)) ^ np.uint64(c))


def rng_uniform(key, n):
    u = (mix64(key ^ mix64(np.arange(n, dtype=np.uint64))) >> np.uint64(40)).astype(np.float64) / 16777216.0
    return u.astype(np.float32)


def init_layer(l, fan_in, fan_out):  # model.c's init_layer_host: nn.Linear's ranges, keyed by the global layer
    bound = np.float32(1.0) / np.sqrt(np.float32(fan_in))
    kw, kb = rng_key(SEED, 1, 2 * l), rng_key(SEED, 1, 2 * l + 1)
    W = (np.float32(2) * rng_uniform(kw, fan_in * fan_out) - np.float32(1)) * bound
    b = (np.float32(2) * rng_uniform(kb, fan_out) - np.float32(1)) * bound
    return W.reshape(fan_out, fan_in), b


rs = np.random.RandomState(3)
X = rs.randn(B, D).astype(np.float32) * 2
y = rs.randint(0, C, size=B).astype(np.int32)
np.save(tmp + "/x.npy", X)
np.save(tmp + "/y.npy", y)

cmd = [micropp, "train", "--data", tmp + "/x.npy", "--labels", tmp + "/y.npy", "--layers", str(L), "--inputs", str(D),
       "--hidden", str(H), "--classes", str(C), "--batch", str(B), "--steps", str(STEPS), "--lr", str(LR),
       "--seed", str(SEED), "--clip-grad", repr(norm), "--optimizer", optim, "--log-every", "0", "--eval-samples", "0",
       "--json"]
out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
if out.returncode != 0:
    print(json.dumps({"error": "micropp exit %d: %s" % (out.returncode, out.stderr.strip()[:300])}))
    sys.exit(0)
mine = json.loads(out.stdout.strip().splitlines()[-1])

torch.set_num_threads(1)
layers = [torch.nn.Linear(D if l == 0 else H, H) for l in range(L)] + [torch.nn.Linear(H, C)]
with torch.no_grad():
    for l, lin in enumerate(layers):
        W, b = init_layer(l, lin.in_features, lin.out_features)
        lin.weight.copy_(torch.from_numpy(W))
        lin.bias.copy_(torch.from_numpy(b))
mods = []
for lin in layers[:-1]:
    mods += [lin, torch.nn.ReLU()]
model = torch.nn.Sequential(*mods, layers[-1])
opt = (torch.optim.Adam if optim == "adam" else torch.optim.SGD)(model.parameters(), lr=LR)
xt, yt = torch.from_numpy(X), torch.from_numpy(y).long()
losses, norms, clipped = [], [], []
for step in range(STEPS):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xt), yt)
    loss.backward()
    n = float(torch.nn.utils.clip_grad_norm_(model.parameters(), norm))
    losses.append(loss.item())
    norms.append(n)
    clipped.append(norm / (n + 1e-6) < 1)
    opt.step()


def worst(a, b):
    return max(abs(p - q) / abs(q) for p, q in zip(a, b))


print(json.dumps({"loss_rel": worst(mine["losses"], losses), "norm_rel": worst(mine["grad_norms"], norms),
                  "clipped": mine["clipped"], "torch_clipped": clipped, "steps_clipped": mine["steps_clipped"],
                  "losses": mine["losses"], "torch_losses": losses, "norms": mine["grad_norms"], "torch_norms": norms}))
