// train/report_json.c: the Summary as the one --json object rank 0 prints after the last step: the
// run's choices and figures, data parallelism, the pipeline's bubble per stage, tensor parallelism,
// the epochs and --verify; its last key says whether every output was written.
#include <math.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "train/report_json.h"
#include "comms/slurm.h"
#include "base/util.h"

// How waiting ranks spent their core (comms/watchdog.h): the policy and what it decided on this rank.
static void json_waits(cJSON *o) {
    WdWaits w;
    wd_waits(&w);
    const char *policy[] = {"active", "passive", "auto"}, *mode[] = {"spin", "yield", "sleep"};
    cJSON_AddStringToObject(o, "wait_policy", policy[w.policy]);
    cJSON_AddStringToObject(o, "waits", mode[w.mode]);
}

// The 3D grid (ranks = pp x dp x tp, tp innermost), then tensor parallelism's part.
static void json_grid(cJSON *o, const Plan *p, const Summary *s) {
    cJSON *g = cJSON_AddObjectToObject(o, "grid");
    cJSON_AddNumberToObject(g, "pp", p->K);
    cJSON_AddNumberToObject(g, "dp", p->D);
    cJSON_AddNumberToObject(g, "tp", p->T);
    tensor_report_json(o, p, &s->tensor);
    expert_report_json(o, &s->expert);
}

static void json_verify(cJSON *o, const VerifyResult *v) {
    cJSON_AddNumberToObject(o, "verify_max_rel_err", v->worst_err);
    cJSON_AddItemToObject(o, "verify_stage_rel_err", cJSON_CreateDoubleArray(v->err, v->S));
    cJSON_AddItemToObject(o, "verify_stage_noise", cJSON_CreateDoubleArray(v->noise, v->S));
    cJSON_AddNumberToObject(o, "verify_tolerance", v->tol);
    cJSON_AddNumberToObject(o, "verify_relu_ties", (double)v->relu_ties);
    cJSON_AddBoolToObject(o, "verify_ok", !v->failed);
}

// --epochs: the data set, and one object per epoch run.
static void json_epochs(cJSON *o, const Plan *p, const Data *d, const Measure *m, const Progress *g) {
    cJSON_AddStringToObject(o, "data", d->name);
    cJSON_AddNumberToObject(o, "train_rows", (double)d->train.n);
    cJSON_AddNumberToObject(o, "test_rows", (double)d->test.n);
    if (d->train.pixels) {
        cJSON_AddNumberToObject(o, "data_mean", d->mean);
        cJSON_AddNumberToObject(o, "data_std", d->std);
    }
    if (!p->epochs) return;
    cJSON_AddNumberToObject(o, "epochs_planned", p->epochs);
    cJSON_AddNumberToObject(o, "steps_per_epoch", (double)p->steps_per_epoch);
    cJSON_AddNumberToObject(o, "dropped_rows_per_epoch", (double)p->dropped);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < m->n_epoch; i++) {
        const EpochStat *e = &m->epoch[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "epoch", e->epoch);
        cJSON_AddNumberToObject(x, "train_loss", e->train_loss);
        if (isfinite(e->test_loss)) cJSON_AddNumberToObject(x, "test_loss", e->test_loss);
        else cJSON_AddNullToObject(x, "test_loss");
        if (isfinite(e->test_accuracy)) cJSON_AddNumberToObject(x, "test_accuracy", e->test_accuracy);
        else cJSON_AddNullToObject(x, "test_accuracy");
        cJSON_AddNumberToObject(x, "time_s", e->time_s);
        cJSON_AddNumberToObject(x, "samples_per_s", e->samples_s);
        cJSON_AddItemToArray(a, x);
    }
    cJSON_AddItemToObject(o, "epochs", a);
    if (g->best_epoch) {
        cJSON_AddNumberToObject(o, "best_epoch", g->best_epoch);
        cJSON_AddNumberToObject(o, "best_test_accuracy", g->best_accuracy);
    }
}

// --clip-grad: the norm, and per step run the gradients' global norm before clipping and whether it clipped.
static void json_clip(cJSON *o, const TrainConfig *c, const Measure *m, int start, int n) {
    cJSON_AddNumberToObject(o, "clip_grad", c->guard.clip_grad);
    cJSON_AddItemToObject(o, "grad_norms", cJSON_CreateDoubleArray(m->grad_norm + start, n));
    cJSON *a = cJSON_AddArrayToObject(o, "clipped");
    int count = 0;
    for (int i = start; i < start + n; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateBool(m->clip_scale[i] < 1));
        count += m->clip_scale[i] < 1;
    }
    cJSON_AddNumberToObject(o, "steps_clipped", count);
}

// --post-validate: per step run what became of its optimistic update ("stood", "undone": a rank's non-finite
// gradient, the step skipped; "redone": --clip-grad's norm said it clips), the counts of each, and how many
// times the next step ran again from the parameters put back (every undone or redone step but the run's last).
static void json_postval(cJSON *o, const Measure *m, int start, int n) {
    cJSON *a = cJSON_AddArrayToObject(o, "post_validation");
    int count[3] = {0, 0, 0}, rerun = 0;
    for (int i = start; i < start + n; i++) {
        int k = (int)m->postval[i];
        cJSON_AddItemToArray(a, cJSON_CreateString(measure_postval_name(k)));
        count[k]++;
        rerun += k > 0 && i < start + n - 1;
    }
    cJSON_AddNumberToObject(o, "steps_undone", count[1]);
    cJSON_AddNumberToObject(o, "steps_redone", count[2]);
    cJSON_AddNumberToObject(o, "steps_rerun", rerun);
}

// --experts: the layer's options, the rows each expert got, the drops and the auxiliary loss, per step
// run (summed over the MoE layers and ranks) and as means.
static void json_moe(cJSON *o, const TrainConfig *c, const Measure *m, int start, int n) {
    int E = m->moe.E;
    cJSON *x = cJSON_AddObjectToObject(o, "moe");
    cJSON_AddNumberToObject(x, "experts", E);
    cJSON_AddNumberToObject(x, "top_k", (double)c->moe.top_k);
    cJSON_AddNumberToObject(x, "moe_every", (double)c->moe.every);
    cJSON_AddNumberToObject(x, "capacity_factor", c->moe.capacity);
    cJSON_AddNumberToObject(x, "aux_loss_coef", c->moe.aux);
    cJSON *rows = cJSON_AddArrayToObject(x, "rows_per_expert");  // [step][expert]
    for (int i = start; i < start + n; i++)
        cJSON_AddItemToArray(rows, cJSON_CreateDoubleArray(m->moe.load + (size_t)i * E, E));
    cJSON_AddItemToObject(x, "dropped", cJSON_CreateDoubleArray(m->moe.dropped + start, n));
    cJSON_AddItemToObject(x, "assigned", cJSON_CreateDoubleArray(m->moe.assigned + start, n));
    cJSON_AddItemToObject(x, "aux_loss", cJSON_CreateDoubleArray(m->moe.aux + start, n));
    double *load = xcalloc((size_t)E, sizeof(double));
    MoeMeans mm = measure_moe_means(m, start, n, load);
    cJSON_AddItemToObject(x, "mean_rows_per_expert", cJSON_CreateDoubleArray(load, E));
    cJSON_AddNumberToObject(x, "busiest_over_even", mm.busiest);
    cJSON_AddNumberToObject(x, "dropped_share", mm.dropped_share);
    cJSON_AddNumberToObject(x, "mean_aux_loss", mm.aux);
    free(load);
}

void summary_json(const Run *r, const Summary *s) {
    const TrainConfig *c = r->c;
    const Plan *p = &r->p;
    const Measure *m = &r->m;
    const Model *model = &r->model;
    int start = s->start, steps = (int)p->steps;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "mode", s->mode);  // (kept for scripts: the spelling of the degrees below)
    cJSON *deg = cJSON_AddObjectToObject(o, "degrees");
    cJSON_AddNumberToObject(deg, "pp", p->K);
    cJSON_AddNumberToObject(deg, "dp", p->D);
    cJSON_AddNumberToObject(deg, "tp", p->T);
    cJSON_AddNumberToObject(deg, "zero", p->data.zero);
    cJSON_AddNumberToObject(o, "layers", (double)c->layers);
    cJSON_AddNumberToObject(o, "hidden", (double)c->hidden);
    cJSON_AddNumberToObject(o, "inputs", (double)p->inputs);
    cJSON_AddNumberToObject(o, "classes", (double)c->classes);
    cJSON_AddNumberToObject(o, "batch", (double)c->batch);
    cJSON_AddNumberToObject(o, "steps", steps);
    cJSON_AddStringToObject(o, "optimizer", s->optimizer);
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddNumberToObject(o, "params", (double)s->params);
    cJSON_AddNumberToObject(o, "start_step", start);
    cJSON_AddNumberToObject(o, "first_loss", m->loss[start]);
    cJSON_AddNumberToObject(o, "final_loss", m->loss[steps - 1]);
    if (isfinite(s->accuracy)) cJSON_AddNumberToObject(o, "accuracy", s->accuracy);
    else cJSON_AddNullToObject(o, "accuracy");
    cJSON_AddNumberToObject(o, "eval_rows", (double)s->eval_rows);
    if (r->data.train.n) json_epochs(o, p, &r->data, m, &r->progress);
    cJSON_AddNumberToObject(o, "step_ms_median", s->step_ms);
    if (s->predicted.step_ms > 0) {
        cJSON_AddNumberToObject(o, "predicted_step_ms", s->predicted.step_ms);
        cJSON_AddStringToObject(o, s->predicted.picked ? "auto_layout" : "priced_layout", s->predicted.layout);
    }
    cJSON_AddNumberToObject(o, "samples_per_s", s->samples_s);
    cJSON_AddNumberToObject(o, "gflops", s->gflops);
    if (isfinite(s->mfu)) cJSON_AddNumberToObject(o, "mfu", s->mfu);  // a fraction of the ranks' summed peak
    else cJSON_AddNullToObject(o, "mfu");
    cJSON_AddNumberToObject(o, "peak_gflops", s->peak.total_gflops);
    cJSON_AddStringToObject(o, "peak_source", s->peak.source);
    cJSON_AddNumberToObject(o, "peak_measure_s", s->peak.seconds);  // rank 0's measurement: wall time ...
    cJSON_AddNumberToObject(o, "peak_measure_cpu_s", s->peak.cpu_seconds);  // ... and CPU time
    cJSON_AddStringToObject(o, "blas", s->blas);
    cJSON_AddStringToObject(o, "device", r->wire.be->name);
    cJSON_AddStringToObject(o, "device_info", s->device);
    cJSON_AddBoolToObject(o, "tf32", c->gemm.tf32);
    // (MPI_COMM_TYPE_SHARED groups)
    if (r->wire.hardware.nodes) cJSON_AddNumberToObject(o, "nodes", r->wire.hardware.nodes);
    if (p->world > 1) json_waits(o);
    cJSON *job = slurm_json();  // under Slurm: the job, its step and nodes
    if (job) cJSON_AddItemToObject(o, "slurm", job);
    cJSON_AddStringToObject(o, "precision", s->precision);
    if (s->onednn[0]) cJSON_AddStringToObject(o, "onednn", s->onednn);
    if (c->gemm.timing) {
        cJSON_AddNumberToObject(o, "gemm_ms_per_step", s->gemm_ms);
        cJSON_AddNumberToObject(o, "gemm_share", s->gemm_share);
        cJSON_AddNumberToObject(o, "gemm_gflops", s->gemm_gflops);
    }
    cJSON_AddItemToObject(o, "losses", cJSON_CreateDoubleArray(m->loss + start, s->n_run));  // steps start+1..steps
    if (c->guard.clip_grad > 0) json_clip(o, c, m, start, s->n_run);
    if (c->guard.post_validate) json_postval(o, m, start, s->n_run);
    if (m->moe.E) json_moe(o, c, m, start, s->n_run);
    if (c->ckpt.resume[0]) cJSON_AddStringToObject(o, "resumed_from", c->ckpt.resume);
    if (r->progress.saved_step >= 0) {
        cJSON_AddStringToObject(o, "saved_to", c->ckpt.save);
        cJSON_AddNumberToObject(o, "saved_step", (double)r->progress.saved_step);
    }
    if (p->mode == MODE_MANUAL) cJSON_AddNumberToObject(o, "parts", p->K);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory_per_rank");  // allocated, the largest over the ranks
    cJSON_AddNumberToObject(mem, "weights", s->weight_bytes);
    cJSON_AddNumberToObject(mem, "grads", s->grad_bytes);
    cJSON_AddNumberToObject(mem, "optimizer", s->optimizer_state_bytes);
    cJSON_AddNumberToObject(mem, "max_rss", s->max_rss);  // the process's peak resident set (getrusage)
    if (p->N > 1 || p->grad_accum_given) cJSON_AddNumberToObject(o, "grad_accum", p->N);
    data_report_json(o, mem, p, &s->data);
    pipeline_report_json(o, p, &s->pipe);
    if (!p->pipelined) {  // the monolith, a ddp replica, the manual split's parts: each stage's own peak
        double peak[MAX_STAGES];
        for (int k = 0; k < model->n_local && k < MAX_STAGES; k++) peak[k] = (double)model->local[k].mem.peak_act_bytes;
        cJSON_AddItemToObject(o, "peak_activation_bytes",
                              cJSON_CreateDoubleArray(peak, model->n_local < MAX_STAGES ? model->n_local : MAX_STAGES));
    }
    if (p->distributed) json_grid(o, p, s);
    if (s->verify) json_verify(o, s->verify);
    cJSON_AddBoolToObject(o, "completed", !s->write_err[0]);  // last: every output written (REPORT_COMPLETED)
    json_print(o);
}

