/*---
name: windowed_count
description: >
  Count rows per key in event-time tumbling windows. Output: window_start, window_end, the key column and
  `events`. Declare `primary_key: [window_start, <key>]` on the table. The SQL carries its own watermark
  (Spark SQL's `WATERMARK col DELAY OF INTERVAL n SECONDS` clause), so a streaming run bounds its state;
  rows that arrive later than the watermark are dropped by a streaming run but counted by a batch run
  (`tidehouse flow status` counts them as late_dropped) — keep `watermark_seconds` above the lateness your
  sources can have.
inputs: [events]
params:
  key:
    type: string
    default: user_id
    description: The grouping column.
  ts:
    type: string
    default: ts
    description: The event-time column (a timestamp).
  window:
    type: string
    default: 1 minute
    description: The window length, as Spark writes intervals ("30 seconds", "5 minutes", "1 hour").
  watermark_seconds:
    type: int
    default: 60
    description: How late (in seconds of event time) a row may arrive and still be counted.
---*/
SELECT window.start AS window_start, window.end AS window_end, IDENTIFIER(:key), count(*) AS events
FROM events WATERMARK IDENTIFIER(:ts) DELAY OF INTERVAL :watermark_seconds SECONDS
GROUP BY window(IDENTIFIER(:ts), :window), IDENTIFIER(:key)
