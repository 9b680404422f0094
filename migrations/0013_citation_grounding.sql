-- 0013: citation accuracy and citation rate (issue 31; ADR-0033). record_answer now checks each
-- citation's claim against the passage it cites (knowledge/core/grounding.py): the verdict fills
-- knowledge_trace_citations.supported (0012); a hallucinated citation is unsupported, and one whose
-- passage is gone has no verdict. An answer also records the shown passages it drew on (a sentence
-- supported by them, cited or not): chunk ids, not content.
ALTER TABLE knowledge_trace_answers ADD COLUMN drawn_on text[] NOT NULL DEFAULT '{}';

-- accuracy = supported / (supported + unsupported); rate = answers_citing_drawn / answers_drawing.
ALTER TABLE knowledge_citation_stats
    ADD COLUMN supported bigint NOT NULL DEFAULT 0,
    ADD COLUMN unsupported bigint NOT NULL DEFAULT 0,            -- hallucinated ones included
    ADD COLUMN answers_drawing bigint NOT NULL DEFAULT 0,        -- answers that drew on a shown passage
    ADD COLUMN answers_citing_drawn bigint NOT NULL DEFAULT 0;   -- of those, citing every one they drew on
