// Generated from pipelink/runtime/manifest.py (WORKSPACE): edit that, then write this file again with
//   python -c 'import pipelink.runtime.manifest as m; print(m.workspace_header(), end="")' > pipelink/include/pipelink/workspace.h
// The header of a persistent kernel's event workspace, in 64-bit words; the event regions follow it.
#pragma once

namespace pl {
namespace events {

// Enumerators, not variables: they leave no symbol in the linked cubin.
enum : unsigned {
  kWorkspaceHeaderWords = 16u,
  kTaskCounterWord = 8u,  // the dynamic dispatch's task counter
  kLaunchWord = 9u,  // launches finished: the next one counts in region launch & 1
  kExitWord = 10u,  // CTAs of the running launch that are done
  kUsedWords = 11u,  // two words: the counters each region's last launch used
};

// Where a debug build reports a wait that never ended: the first words of the workspace, which
// the launcher reads back after the kernel has stopped.
struct Timeout {
  unsigned long long epoch;
  unsigned long long component;
  unsigned long long event;
  unsigned long long element;
  unsigned long long expected;
  unsigned long long observed;
  unsigned long long task;
  unsigned long long abort;
};
static_assert(sizeof(Timeout) == 8 * 8, "the report's words");

}  // namespace events
}  // namespace pl
