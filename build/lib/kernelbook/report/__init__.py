"""From tables to pages, without a GPU: study.json, figures, the worklog page, the index,
publishing and staleness."""
