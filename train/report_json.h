// train/report_json.h: the Summary as the one --json object (train/report_json.c), summary_print's JSON half.
#pragma once
#include "train/summary.h"

// Rank 0: prints the object, its last key "completed" (REPORT_COMPLETED's twin).
void summary_json(const Run *r, const Summary *s);
