# bench/moe_torch.py: bench/moe_torch.sh's yardstick: micropp's mixture-of-experts model (--experts,
# docs/experts.md) in PyTorch on the CPU, the routing rule of tests/moe_torch.py (softmax router, top k
# with gates renormalised, capacity ceil(cf x rows x k / E) filled in row order, a row with nothing kept
# passed through, Switch's aux loss) but each expert run on its own rows only, as a real MoE layer runs.
# --ranks 2: two processes, torch.distributed gloo, DDP over the batch (each rank batch/ranks rows).
# Prints one JSON line: step_ms_median (rank 0's), samples_per_s, the losses.
import argparse, json, math, os, statistics, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--hidden", type=int, default=512)
ap.add_argument("--inputs", type=int, default=784)
ap.add_argument("--classes", type=int, default=10)
ap.add_argument("--batch", type=int, default=128, help="the global batch (split over --ranks)")
ap.add_argument("--experts", type=int, default=4)
ap.add_argument("--top-k", type=int, default=2)
ap.add_argument("--capacity-factor", type=float, default=1.25)
ap.add_argument("--aux-loss", type=float, default=0.01)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
ap.add_argument("--ranks", type=int, default=1, help="processes (gloo DDP) when above 1")
a = ap.parse_args()
try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(json.dumps({"skipped": "no PyTorch for %s: %s" % (sys.executable, e)}))
    sys.exit(0)


class MoE(torch.nn.Module):  # one MoE layer: docs/experts.md's rule
    def __init__(self, H, E):
        super().__init__()
        self.router = torch.nn.Linear(H, E)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(H, H) for _ in range(E))

    def forward(self, x):
        n, E, k = x.shape[0], len(self.experts), a.top_k
        p = torch.softmax(self.router(x), dim=1)
        idx = torch.sort(p.detach(), dim=1, descending=True, stable=True).indices[:, :k]
        pk = p.gather(1, idx)
        gate = pk / pk.sum(1, keepdim=True)
        flat = idx.reshape(-1)  # row 0's k picks (best first), then row 1's: the fill order
        onehot = F.one_hot(flat, E)
        place = (onehot.cumsum(0) - 1).gather(1, flat.unsqueeze(1)).squeeze(1)
        keep = place < math.ceil(a.capacity_factor * n * k / E)
        f = onehot.sum(0).float() / (n * k)
        aux = a.aux_loss * E * (f * p.mean(0)).sum()
        y = torch.zeros_like(x)
        rows = torch.arange(n).repeat_interleave(k)
        g = gate.reshape(-1)
        for e, lin in enumerate(self.experts):
            sel = ((flat == e) & keep).nonzero().squeeze(1)
            if sel.numel():
                r = rows[sel]
                y = y.index_add(0, r, g[sel].unsqueeze(1) * torch.relu(lin(x[r])))
        through = keep.reshape(n, k).sum(1) == 0
        return torch.where(through.unsqueeze(1), x, y), aux


class Model(torch.nn.Module):  # layer 0 dense (fan-in D), hidden layers l >= 1 MoE, the head
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(a.inputs, a.hidden)
        self.moe = torch.nn.ModuleList(MoE(a.hidden, a.experts) for _ in range(a.layers - 1))
        self.head = torch.nn.Linear(a.hidden, a.classes)

    def forward(self, x):
        h, aux = torch.relu(self.first(x)), 0.0
        for m in self.moe:
            h, aux_l = m(h)
            aux = aux + aux_l
        return self.head(h), aux


def run(rank):
    torch.set_num_threads(a.threads)
    torch.manual_seed(42)
    model = Model()
    if a.ranks > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
        model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)  # (an expert may get no rows)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    rows = a.batch // a.ranks
    gen = torch.Generator().manual_seed(7 + rank)
    x = torch.randn(rows, a.inputs, generator=gen)
    y = torch.randint(0, a.classes, (rows,), generator=gen)
    times, losses = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits, aux = model(x)
        loss = F.cross_entropy(logits, y)
        (loss + aux).backward()
        opt.step()
        losses.append(loss.item())  # the host reads the loss every step, as micropp does
        times.append(time.perf_counter() - t0)
    if a.ranks > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        kept = times[3:] if len(times) > 6 else times  # the first steps warm the allocator up
        ms = 1e3 * statistics.median(kept)
        print(json.dumps({"ranks": a.ranks, "threads": a.threads, "step_ms_median": ms,
                          "samples_per_s": a.batch / (ms / 1e3), "losses": losses, "torch": torch.__version__}))


if a.ranks > 1:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    torch.multiprocessing.start_processes(run, nprocs=a.ranks, start_method="fork")  # (children keep `a`)
else:
    run(0)
