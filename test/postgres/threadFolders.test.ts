/** The thread-folders contract on PostgreSQL, with the transcript store of the same schema. */
import { createPgThreadFolders } from '../../persistence/postgres/pgThreadFolders.js'
import { createPgTranscriptStore } from '../../persistence/postgres/pgTranscript.js'
import { threadFoldersContract } from '../contract/threadFolders.contract.js'
import { freshDatabase } from '../helpers/postgres.js'

threadFoldersContract('postgres', () => {
  const d = freshDatabase()
  const transcripts = createPgTranscriptStore({ db: d.db })
  return { folders: createPgThreadFolders({ db: d.db, transcripts }), transcripts, destroy: d.destroy }
})
