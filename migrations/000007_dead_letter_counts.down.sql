DROP TRIGGER IF EXISTS converge_dead_letter_counts_truncate ON converge_dead_letters;
DROP TRIGGER IF EXISTS converge_dead_letter_counts_delete ON converge_dead_letters;
DROP TRIGGER IF EXISTS converge_dead_letter_counts_update ON converge_dead_letters;
DROP TRIGGER IF EXISTS converge_dead_letter_counts_insert ON converge_dead_letters;
DROP FUNCTION IF EXISTS converge_dead_letter_counts_truncate();
DROP FUNCTION IF EXISTS converge_dead_letter_counts_add();
DROP TABLE IF EXISTS converge_dead_letter_counts;
