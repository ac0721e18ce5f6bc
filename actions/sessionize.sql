/*---
name: sessionize
description: >
  Group each key's events into sessions: a session ends after `gap` without an event (Spark's
  session_window). Output: the key column, session_start, session_end (last event + gap), events and
  duration_seconds. Declare `primary_key: [<key>, session_start]`. Spark cannot update sessions in a
  streaming aggregation, so the table is recomputed from its input when the input changes (`recompute`,
  equal to the batch result; no watermark, no late rows dropped, O(input) per micro-batch).
inputs: [events]
params:
  key:
    type: string
    default: user_id
    description: The column whose events form sessions.
  ts:
    type: string
    default: ts
    description: The event-time column (a timestamp).
  gap:
    type: string
    default: 30 minutes
    description: Inactivity that closes a session ("30 seconds", "30 minutes").
---*/
SELECT IDENTIFIER(:key),
       session_window.start AS session_start,
       session_window.end   AS session_end,
       count(*)             AS events,
       CAST(unix_micros(session_window.end) - unix_micros(session_window.start) AS DOUBLE) / 1e6
                            AS duration_seconds
FROM events
GROUP BY IDENTIFIER(:key), session_window(IDENTIFIER(:ts), :gap)
