// One-sided tensor windows: put, accumulate and get of tensors between
// replicas without the receiver's help (window/window.hpp).
//   #include <chorus/window.hpp>
#pragma once

#include <chorus/window/window.hpp>
