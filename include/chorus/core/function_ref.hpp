// function_ref: a non-owning reference to a callable.
#pragma once

#include <concepts>
#include <memory>
#include <type_traits>
#include <utility>

namespace chorus {

// A non-owning reference to a callable: for virtual interfaces that take a
// callback without allocating.
template <class Signature>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template <class F>
    requires(!std::same_as<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
  function_ref(F&& callable) noexcept  // NOLINT: implicit, like a function pointer
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace chorus
