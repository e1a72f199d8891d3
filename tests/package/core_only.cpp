// chorus::core needs nothing else: no UCX, no Boost.
#include <chorus/core/bfloat16.hpp>
#include <chorus/core/reduce_op.hpp>

int main() { return chorus::op::max{}(float(chorus::bfloat16(1.0f)), 0.5f) == 1.0f ? 0 : 1; }
