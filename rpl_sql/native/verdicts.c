/* The arrow engine's verdicts for one events file, in one pass that lets the GIL go (rpl_sql.native; the
   numpy twin is arrow_write.Verdicts._positions and _fold, and tests/pipeline/test_verdicts.py holds them equal).

   Per event: the ingest rollup holding its seq (rollups sorted by first seq, not overlapping), its shape id
   checked against that rollup's size, its shape's applied row (`lut`, -1: not applied). Out: the kept events'
   bitmap (Arrow's bit order) and indices, their applied_db and decided_by codes, each applied row's count, and
   the shape positions of events 0, every, 2 * every, ... and of the last (the sample `Verdicts.check` compares).
   Returns 0; 1 when an event lies outside every rollup (the caller finds the file's shapes by key); 2 when
   none does but an id lies, the first such event's index in *bad. */
#include <stdint.h>
#include <string.h>

int rpl_sql_verdicts(int64_t n, const int64_t *seq, const int64_t *ids,
                     int64_t rollups, const int64_t *starts, const int64_t *ends, const int64_t *sizes,
                     const int64_t *offsets, const int64_t *lut, const int32_t *code_a, const int32_t *code_b,
                     uint8_t *bitmap, int32_t *kept_rows, int32_t *out_a, int32_t *out_b, int64_t *counts,
                     int64_t every, int64_t *picks, int64_t *kept, int64_t *bad)
{
    int64_t k = -1, m = 0, j = 0, at = 0, lying = -1, next_pick = 0;
    memset(bitmap, 0, (size_t)((n + 7) / 8));
    for (int64_t i = 0; i < n; i++) {
        int64_t s = seq[i];
        if (k < 0 || s < starts[k] || s > ends[k]) {
            int64_t lo = 0, hi = rollups;
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (starts[mid] <= s) lo = mid + 1; else hi = mid;
            }
            k = lo - 1;
            if (k < 0 || s > ends[k]) {
                *bad = i;
                return 1;
            }
        }
        if (lying >= 0)
            continue;  /* only looking for an event outside the rollups now */
        int64_t id = ids[i];
        if (id < 0 || id >= sizes[k]) {
            lying = i;
            continue;
        }
        at = offsets[k] + id;
        if (i == next_pick) {  /* (no division per event: it cost more than the rest of the loop) */
            picks[j++] = at;
            next_pick += every;
        }
        int64_t row = lut[at];
        if (row >= 0) {
            bitmap[i >> 3] |= (uint8_t)(1u << (i & 7));
            kept_rows[m] = (int32_t)i;
            out_a[m] = code_a[row];
            out_b[m] = code_b[row];
            counts[row]++;
            m++;
        }
    }
    if (lying >= 0) {
        *bad = lying;
        return 2;
    }
    if (n > 0)
        picks[j] = at;
    *kept = m;
    return 0;
}
