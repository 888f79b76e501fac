/* Private to gpu/: AUTO pruning's choice between pruned and exhaustive batches and what it learns from
 * each batch (backend.c), apart from the device so that a test can drive it with the times it chooses. */
#ifndef ISN_GPU_PRUNE_CHOICE_H
#define ISN_GPU_PRUNE_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

/* What AUTO pruning learned for one class of batch sizes (prune_class): [0] exhaustive, [1] pruned. */
#define PRUNE_CLASSES 6
typedef struct {
    double ms_per_mposting[2];
    uint64_t batches[2];   /* learned from */
    uint64_t chosen[2];    /* sent */
    uint32_t outliers[2];  /* samples in a row far above the mode's average, set aside */
    uint32_t one_offs[2];  /* one-off samples set aside while the mode had none (prune_learn) */
    bool provisional[2];   /* the average is one one-off sample */
} prune_learning;

/* The class of a batch of n queries: 1, 4, 16, 64, 256 and more, by powers of four. */
uint32_t prune_class(uint32_t n);
/* Whether the class's next batch prunes, counted as sent; streams: the batches a backend keeps in flight. */
bool prune_choose(prune_learning *l, uint32_t streams);
/* Folds a batch's time (ms, over `postings` list postings) into its mode's average. A sample more than
 * PRUNE_OUTLIER_FACTOR times the average is set aside unless PRUNE_OUTLIER_RUN of them come in a row:
 * one batch that waited on the host (a stalled completion thread, a driver call of another upload) must
 * not make its mode look several times dearer, switch the class to the other one and keep it there until
 * the next exploration. true when the sample was taken. */
#define PRUNE_OUTLIER_FACTOR 4.0
#define PRUNE_OUTLIER_RUN 3
/* one_off: the batch also paid for work later batches of either mode reuse (filter bitmaps it built). Such
 * samples are set aside: learnt like the others, a filter's first batches made their mode look the dearer,
 * and AUTO kept to the other. Only a mode that got PRUNE_ONE_OFF_RUN of them and no ordinary one (a class
 * whose every batch builds) takes one, until its first ordinary sample replaces it. */
#define PRUNE_ONE_OFF_RUN 8
bool prune_learn(prune_learning *l, bool pruned, double ms, uint64_t postings, bool one_off);

#endif
