// planner/cache.c: `plan --auto`'s costs out of the box (planner/cache.h): the key of what a calibration's
// figures depend on, the cache's folder ($MICROPP_CACHE, else $XDG_CACHE_HOME/micropp, else
// ~/.cache/micropp), a file per key, and the calibration run as a child (mpiexec, this binary) when the
// file is missing or was measured for another key; the key is kept inside the profile ("cache_key").
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "base/ops.h"
#include "base/util.h"
#include "planner/cache.h"

#define CACHE_FORMAT 3  // profiles with the collectives' wait measured (collective_wait; 2: the labels timed apart)

static void cpu_model(char *out, size_t n) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(out, n, "unknown");
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && v) {
            snprintf(out, n, "%s", v + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    }
    if (f) fclose(f);
}

void cache_key(const TrainConfig *c, int world, char *out, size_t n) {
    char host[256] = "", cpu[256], blas[160];
    gethostname(host, sizeof host - 1);
    cpu_model(cpu, sizeof cpu);
    blas_set_threads((int)c->threads);
    blas_describe(blas, sizeof blas);
    snprintf(out, n, "format %d | host %s | cpu %s | %s | hidden %lld inputs %lld classes %lld batch %lld | %d ranks",
             CACHE_FORMAT, host, cpu, blas, (long long)c->hidden, (long long)(c->inputs ? c->inputs : c->hidden),
             (long long)c->classes, (long long)c->batch, world);
}

void cache_foreign(const char *source, const TrainConfig *c, int world, char *out, size_t n) {
    char here[160], there[160], model[PATH_LEN + 200];
    const char *at = strstr(source, "openblas ");
    out[0] = 0;
    if (!at) return;
    snprintf(there, sizeof there, "%.*s", (int)strcspn(at, ",|)"), at);
    while (there[0] && there[strlen(there) - 1] == ' ') there[strlen(there) - 1] = 0;
    blas_set_threads((int)c->threads);
    blas_describe(here, sizeof here);
    if (!strcmp(here, there)) return;
    if (c->config[0]) snprintf(model, sizeof model, "--config %s", c->config);
    else snprintf(model, sizeof model, "--hidden %lld --inputs %lld --classes %lld --batch %lld", (long long)c->hidden,
                  (long long)(c->inputs ? c->inputs : c->hidden), (long long)c->classes, (long long)c->batch);
    snprintf(out, n, "# warning: the profile was measured with %s, and this machine runs %s: its figures are another "
             "machine's; measure this one: mpiexec -n %d micropp plan --calibrate %s --threads %lld "
             "--out profile.json\n", there, here, world, model, (long long)c->threads);
}

// The cache's folder, made when missing; -1 with why in err.
static int cache_dir(char *dir, size_t dn, char *err, size_t n) {
    const char *mine = getenv("MICROPP_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char parent[PATH_LEN] = "";
    if (mine && mine[0]) snprintf(dir, dn, "%s", mine);
    else if (xdg && xdg[0]) snprintf(parent, sizeof parent, "%s", xdg);
    else if (home && home[0]) snprintf(parent, sizeof parent, "%s/.cache", home);
    else return snprintf(err, n, "no folder for this machine's profile: set MICROPP_CACHE, or give --profile"), -1;
    if (parent[0]) {
        snprintf(dir, dn, "%s/micropp", parent);
        if (mkdir(parent, 0755) && errno != EEXIST)
            return snprintf(err, n, "cannot make '%s': %s: set MICROPP_CACHE", parent, strerror(errno)), -1;
    }
    if (mkdir(dir, 0755) && errno != EEXIST)
        return snprintf(err, n, "cannot make '%s': %s: set MICROPP_CACHE", dir, strerror(errno)), -1;
    return 0;
}

// The key a cached profile was measured for ("" when the file is missing or unreadable).
static void cached_key(const char *path, char *out, size_t n) {
    FILE *f = fopen(path, "rb");
    out[0] = 0;
    if (!f) return;
    char *text = xmalloc(64 << 20);
    size_t got = fread(text, 1, (64 << 20) - 1, f);
    fclose(f);
    text[got] = 0;
    cJSON *o = cJSON_Parse(text), *k = cJSON_GetObjectItem(o, "cache_key");
    snprintf(out, n, "%s", cJSON_IsString(k) ? k->valuestring : "(no key: not a cached profile)");
    cJSON_Delete(o);
    free(text);
}

// The calibration run as a child: mpiexec -n world, this binary, the model's widths; then the key added.
static int measure(const TrainConfig *c, int world, const char *key, const char *path, char *err, size_t n) {
    char self[PATH_LEN] = "", cmd[3 * PATH_LEN + 300], tmp[PATH_LEN + 8];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) return snprintf(err, n, "cannot find this binary (/proc/self/exe) to measure with"), -1;
    self[k] = 0;
    snprintf(tmp, sizeof tmp, "%s.part", path);
    snprintf(cmd, sizeof cmd, "mpiexec -n %d '%s' plan --calibrate --layers %lld --hidden %lld --inputs %lld "
             "--classes %lld --batch %lld --threads %lld --out '%s' >/dev/null", world, self, (long long)c->layers,
             (long long)c->hidden, (long long)(c->inputs ? c->inputs : c->hidden), (long long)c->classes,
             (long long)c->batch, (long long)c->threads, tmp);
    fflush(stdout);
    int rc = system(cmd);
    cJSON *o = NULL;
    FILE *f = rc == 0 ? fopen(tmp, "rb") : NULL;
    if (f) {
        char *text = xmalloc(64 << 20);
        size_t got = fread(text, 1, (64 << 20) - 1, f);
        fclose(f);
        text[got] = 0;
        o = cJSON_Parse(text);
        free(text);
    }
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return snprintf(err, n, "measuring this machine failed (exit %d of: %s): give --profile or --machine", rc, cmd),
               -1;
    }
    cJSON_AddStringToObject(o, "cache_key", key);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    f = fopen(tmp, "wb");
    int ok = f && fputs(text, f) >= 0;
    ok = (f && fclose(f) == 0) && ok && rename(tmp, path) == 0;
    free(text);
    if (!ok) return snprintf(err, n, "cannot write '%s': %s", path, strerror(errno)), -1;
    return 0;
}

int cache_profile(const TrainConfig *c, int world, char *path, size_t pn, char *err, size_t n) {
    char key[1024], had[1024], dir[PATH_LEN];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && world > cores)
        return snprintf(err, n, "--world %d without costs would measure this machine, which has %ld cores: give "
                        "--machine FILE (configs/machines/) for devices not at hand", world, cores), -1;
    if (cache_dir(dir, sizeof dir, err, n)) return -1;
    cache_key(c, world, key, sizeof key);
    uint64_t h = 1469598103934665603ULL;  // FNV-1a of the key: one file per key
    for (const char *s = key; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    snprintf(path, pn, "%s/profile-%016llx.json", dir, (unsigned long long)h);
    cached_key(path, had, sizeof had);
    if (!strcmp(had, key)) {
        printf("# costs: this machine's profile, cached in %s\n", path);
        return 0;
    }
    if (had[0]) printf("# costs: %s was measured for '%s', not this run's '%s': measuring again\n", path, had, key);
    else printf("# costs: none given: measuring this machine once (plan --calibrate on %d rank%s, tens of seconds); "
                "cached in %s\n", world, world == 1 ? "" : "s", path);
    return measure(c, world, key, path, err, n);
}
