/** Public surface of `sources`: feeders of the indexes (the directory source). */

export {
  type ChangeSummary,
  DirectorySource,
  type DirectorySourceOptions,
  type FileStatus,
  type SourceSink,
  type SourceTx,
} from './directory-source.js';
