/*
 * store_layout.h: the byte layouts of the store's own files that its C code writes or reads,
 * named once: a consume queue entry (store/consume_queue.py's CQ_ENTRY) and the IndexFile's
 * header, hash slots and entries (store/index_file.py's _HEADER, _SLOT, _ENTRY) with the planned
 * index entry dispatch hands to index_put (index_file.py's PLANNED_ENTRY). Big-endian, RocketMQ's
 * layout. tests/unit/store/test_stored_layout_lint.py holds every value here to the Python
 * constants (one place per language).
 */
#ifndef ORBITMQ_STORE_LAYOUT_H
#define ORBITMQ_STORE_LAYOUT_H

/* -- a consume queue entry: phy offset i64 | size i32 | tags code i64 ------------------------- */
#define CQ_ENTRY_SIZE 20
#define CQ_PHY_AT 0
#define CQ_SIZE_AT 8
#define CQ_TAGS_CODE_AT 12
#define CQ_BLANK_SIZE 0x7FFFFFFF  /* consume_queue.BLANK_ENTRY_SIZE_FIELD: a filler entry */

/* -- an index file: header | hash_slot_num slots | index_num entries -------------------------- */
#define INDEX_HEADER_SIZE 40
#define INDEX_BEGIN_TS_AT 0        /* i64 */
#define INDEX_END_TS_AT 8          /* i64 */
#define INDEX_BEGIN_PHY_AT 16      /* i64 */
#define INDEX_END_PHY_AT 24        /* i64 */
#define INDEX_SLOT_COUNT_AT 32     /* i32: used hash slots */
#define INDEX_COUNT_AT 36          /* i32: the number of the next entry */
#define INDEX_SLOT_SIZE 4          /* i32: the newest entry of the slot, 0 none */
#define INDEX_ENTRY_SIZE 20
#define INDEX_ENTRY_HASH_AT 0      /* i32 */
#define INDEX_ENTRY_PHY_AT 4       /* i64 */
#define INDEX_ENTRY_TIME_DIFF_AT 12  /* i32: seconds since the begin timestamp */
#define INDEX_ENTRY_PREV_AT 16     /* i32: the previous entry of the same slot, 0 none */

/* -- a planned index entry (dispatch_plan -> index_put): hash i32 | phy i64 | store time i64 -- */
#define PLANNED_ENTRY_SIZE 20
#define PLANNED_HASH_AT 0
#define PLANNED_PHY_AT 4
#define PLANNED_STORE_TS_AT 12

#endif
