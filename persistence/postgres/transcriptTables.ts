/** Tables of the transcript and checkpoint stores (see schema.ts). */
export const TRANSCRIPT_TABLES: readonly string[] = []
export const CHECKPOINT_TABLES: readonly string[] = []
