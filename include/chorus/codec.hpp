// Codecs and compressed collectives: #include <chorus/codec.hpp>.
#pragma once

#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/codec/bf16.hpp>
#include <chorus/codec/codec.hpp>
#include <chorus/codec/error_feedback.hpp>
#include <chorus/codec/fp16.hpp>
#include <chorus/codec/identity.hpp>
#include <chorus/codec/int8.hpp>
#include <chorus/codec/onebit.hpp>
#include <chorus/codec/randomk.hpp>
#include <chorus/codec/topk.hpp>
#include <chorus/compressed/compressed_allgather.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>
#include <chorus/compressed/error_bound.hpp>
