// Pushes two dependent ops through an installed depengine and checks their order.
#include <engine/engine.h>
#include <executors/threadpool/threadpool_executor.h>

#include <cstdio>
#include <memory>

int main() {
  depengine::EngineOptions options;
  options.executors.push_back(std::make_unique<depengine::ThreadPoolExecutor>(depengine::ThreadPoolOptions{.workers = 2}));
  depengine::Engine engine(std::move(options));
  const depengine::Var a = engine.NewVariable(), b = engine.NewVariable();
  int x = 0, y = 0;
  engine.Push([&] { x = 20; }, {}, {a});
  engine.Push([&] { y = x + 22; }, {a}, {b});
  engine.WaitForVar(b);
  std::printf("consumer: y = %d\n", y);
  return y == 42 ? 0 : 1;
}
