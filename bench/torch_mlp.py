# bench/torch_mlp.py: bench/gpu.sh's yardstick on the same machine: micropp's model in PyTorch, the
# same shape, optimizer and precision (fp32; tf32: cuBLAS's TF32 matmuls; bf16: autocast, so the
# products read bf16 inputs and accumulate in fp32 while weights, gradients and Adam stay fp32, as
# micropp's --precision bf16). Prints one JSON line: step_ms_median, samples_per_s, the losses.
# One process, one device: the yardstick for a pipeline config is the same model trained whole.
import argparse, json, statistics, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=16)
ap.add_argument("--hidden", type=int, default=1024)
ap.add_argument("--classes", type=int, default=2)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
ap.add_argument("--device", default="cuda")
a = ap.parse_args()
try:
    import torch
except ImportError as e:
    print(json.dumps({"skipped": "no PyTorch: %s" % e}))
    sys.exit(0)
dev = torch.device(a.device if a.device != "cuda" or torch.cuda.is_available() else "cpu")
torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
torch.manual_seed(42)
mods = []
for _ in range(a.layers):
    mods += [torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU()]
model = torch.nn.Sequential(*mods, torch.nn.Linear(a.hidden, a.classes)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=a.lr)
x = torch.randn(a.batch, a.hidden, device=dev)
y = torch.randint(0, a.classes, (a.batch,), device=dev)
loss_fn = torch.nn.CrossEntropyLoss()


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


times, losses = [], []
for step in range(a.steps):
    sync()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())  # the host reads the loss every step, as micropp does
    sync()
    times.append(time.perf_counter() - t0)
kept = times[2:] if len(times) > 4 else times  # the first steps warm the allocator and cuBLAS up
ms = 1e3 * statistics.median(kept)
print(json.dumps({"device": str(dev), "precision": a.precision, "step_ms_median": ms,
                  "samples_per_s": a.batch / (ms / 1e3), "losses": losses, "torch": torch.__version__}))
