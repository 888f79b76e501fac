/* AUTO pruning (prune_choice.h). Per size class (pruning can pay for a batch of one query and cost for
 * the same queries in batches of 16, where the exhaustive pass keeps the device busier): a run of
 * exhaustive batches, then a run of pruned ones, then the mode with the lower time per list posting, and
 * a run of the other every ISN_GPU_PRUNE_EXPLORE runs times how much slower it is, so that a change in the
 * traffic is noticed for a fixed share of the device's time. A run is streams + 1 batches: with batches in
 * flight, only a batch between two of its own mode measures that mode's cost (isn_gpu_complete learns from
 * no other, nor from one with CPU answers), and a run's middle ones are. A mode still without such a batch
 * after PRUNE_PATIENCE runs is left (a class whose runs interleave with another's may never get one): the
 * measured mode, or exhaustive, serves; when exhaustive is the one left, pruned is not tried at all. */
#include "gpu/prune_choice.h"

#include <math.h>

#include "gpu/gpu.h"

#define PRUNE_PATIENCE 4

uint32_t prune_class(uint32_t n) {
    uint32_t c = 0;
    while (n >= 4 && c + 1 < PRUNE_CLASSES) n >>= 2, c++;
    return c;
}

bool prune_choose(prune_learning *l, uint32_t streams) {
    /* the runs count batches sent, not batches learned from: with batches in flight, counting
     * completions sent every batch of a short burst down the first mode */
    const uint64_t run = (uint64_t)streams + 1, patience = PRUNE_PATIENCE * run;
    bool pruned;
    if (l->chosen[0] < run || (l->batches[0] == 0 && l->chosen[0] < patience)) pruned = false;
    /* exhaustive got no sample in its patience: the class's batches cannot be measured (each also waits on CPU
     * answers, isn_gpu_complete, as on a partition larger than the device), so pruned ones most likely cannot
     * either, and patience spent on them is pruned batches (several exhaustive ones' cost on such partitions)
     * that end in exhaustive all the same */
    else if (l->batches[0] == 0) pruned = false;
    else if (l->chosen[1] < run || (l->batches[1] == 0 && l->chosen[1] < patience)) pruned = true;
    else if (l->batches[1] == 0) pruned = false; /* pruned could not be measured: the measured mode serves */
    else {
        const bool better = l->ms_per_mposting[1] <= l->ms_per_mposting[0];
        /* the other mode's runs take about 1/ISN_GPU_PRUNE_EXPLORE of the device time, however much
         * slower it is (a pruned batch can cost several exhaustive ones) */
        const double ratio = l->ms_per_mposting[!better] / l->ms_per_mposting[better];
        const uint64_t every =
            ISN_GPU_PRUNE_EXPLORE * run * (uint64_t)(ratio >= 1.0 ? (ratio < 64.0 ? ceil(ratio) : 64.0) : 1.0);
        pruned = (l->chosen[0] + l->chosen[1]) % every >= every - run ? !better : better;
    }
    l->chosen[pruned]++;
    return pruned;
}

bool prune_learn(prune_learning *l, bool pruned, double ms, uint64_t postings, bool one_off) {
    if (postings == 0 || !(ms >= 0.0)) return false;
    if (one_off && (l->batches[pruned] || ++l->one_offs[pruned] < PRUNE_ONE_OFF_RUN)) return false;
    const double sample = ms / ((double)postings / 1e6);
    double *average = &l->ms_per_mposting[pruned];
    if (l->provisional[pruned] && !one_off) { /* the first ordinary sample replaces the one-off one */
        l->provisional[pruned] = false;
        l->outliers[pruned] = 0;
        *average = sample;
        l->batches[pruned]++;
        return true;
    }
    l->provisional[pruned] = one_off;
    if (l->batches[pruned] && sample > PRUNE_OUTLIER_FACTOR * *average && ++l->outliers[pruned] < PRUNE_OUTLIER_RUN)
        return false;
    l->outliers[pruned] = 0;
    *average = l->batches[pruned] == 0 ? sample : 0.8 * *average + 0.2 * sample;
    l->batches[pruned]++;
    return true;
}
