package rpl_sql.jvm;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.function.Consumer;
import java.util.function.Predicate;
import java.util.function.Supplier;
import org.apache.spark.TaskContext;
import org.apache.spark.util.TaskCompletionListener;

/**
 * What a task learned (names' ids, decided codes), handed to the JVM's next task with the same id when it
 * ends: one task at a time holds an object, and a 10M-row scan's tasks need not each learn its names again.
 * At most IDS_MAX ids (specs and keys) and KEPT_MAX objects an id (tasks at once).
 */
final class TaskPool<T> {
  private static final int IDS_MAX = 16;
  private static final int KEPT_MAX = 16;
  private final ConcurrentHashMap<String, ConcurrentLinkedQueue<T>> byId = new ConcurrentHashMap<>();

  /**
   * This task's object: one an earlier task handed back under `id` where `usable` takes it, else a `make`d
   * one. When the task ends, `settle` brings it up to date and it is handed back. Outside a task (the
   * driver, tests), a `make`d one that nobody gets back.
   */
  T take(String id, Predicate<T> usable, Supplier<T> make, Consumer<T> settle) {
    TaskContext task = TaskContext.get();
    if (task == null) {
      return make.get();
    }
    if (byId.size() >= IDS_MAX) {
      byId.clear();
    }
    ConcurrentLinkedQueue<T> pool = byId.computeIfAbsent(id, x -> new ConcurrentLinkedQueue<>());
    T got = pool.poll();
    T mine = got != null && usable.test(got) ? got : make.get();
    task.addTaskCompletionListener((TaskCompletionListener) ctx -> {
      settle.accept(mine);
      if (pool.size() < KEPT_MAX) {
        pool.offer(mine);
      }
    });
    return mine;
  }
}
