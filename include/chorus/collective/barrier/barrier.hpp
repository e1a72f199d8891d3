// chorus::barrier: no rank leaves before every rank arrived. Dissemination
// (the communicator's barrier): ceil(log2 n) rounds of zero-byte messages,
// cost ceil(log2 n) alpha, no root.
#pragma once

namespace chorus {

template <class Communicator>
void barrier(Communicator& comm) {
  comm.barrier();
}

}  // namespace chorus
