export { ProcFile, readProcFile, readProcInto, procBuffer, DEFAULT_MAX_BYTES } from './read.js';
export { readPidStat, pidStatOf, decodeExitCode, CLOCK_TICKS, PAGE_SIZE, type PidStat } from './stat.js';
export { readPidStatusFields, type PidStatusFields } from './status.js';
export { countFds, findSocketOwner, listPids } from './fds.js';
export { findProcessByName, readPidFile } from './find.js';
export {
  readTcpSockets,
  TcpState,
  TCP_STATE_NAMES,
  type TcpSocketEntry,
  type TcpSocketFilter,
} from './net-tcp.js';
export {
  readBootId,
  readUptimeMs,
  readLoadAvg,
  readMemInfo,
  readSockstat,
  sockstatFiles,
  type MemInfo,
  type SockstatFiles,
  type SockstatTcp,
} from './system.js';
