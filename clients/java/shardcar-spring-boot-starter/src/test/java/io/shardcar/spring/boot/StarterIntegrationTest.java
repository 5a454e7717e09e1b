package io.shardcar.spring.boot;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.shardcar.client.JobRegistration;
import io.shardcar.client.SidecarUnavailableException;
import io.shardcar.client.testing.Processes;
import io.shardcar.client.testing.Recorder;
import io.shardcar.client.testing.SidecarAdmin;
import io.shardcar.client.testing.SidecarProcess;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.apache.shardingsphere.elasticjob.api.ShardingContext;
import org.apache.shardingsphere.elasticjob.dataflow.job.DataflowJob;
import org.apache.shardingsphere.elasticjob.simple.job.SimpleJob;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthComponent;
import org.springframework.boot.actuate.health.HealthEndpoint;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;

/**
 * A real Spring Boot application (auto-configuration from
 * {@code META-INF/spring/...AutoConfiguration.imports}, jobs from {@code application-it.yml} in
 * ElasticJob's property names) against a real standalone sidecar: its ElasticJob jobs run, and the
 * Actuator health endpoint reports them. A {@code SimpleJob} bean by class runs its items on its
 * cron, a {@code DataflowJob} bean by name streams its backlog in one trigger, a job class that is
 * no bean is created with autowiring; the {@code shardcar} health contributor is UP with every job
 * {@code ACTIVE}, DOWN with the jobs {@code RECONNECTING} once the sidecar is killed, UP again after
 * it restarts; an unreachable sidecar fails the startup, or with {@code shardcar.fail-fast=false}
 * leaves the job {@code FAILED} and the health DOWN.
 */
@Tag("integration")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class StarterIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(30);

  /** A SimpleJob bean found by its class ({@code elasticJobClass}), as ElasticJob's starter does. */
  public static final class CitiesJob implements SimpleJob {
    final Map<Integer, ShardingContext> seen = new ConcurrentHashMap<>();

    @Override
    public void execute(ShardingContext shardingContext) {
      seen.putIfAbsent(shardingContext.getShardingItem(), shardingContext);
    }
  }

  /** A DataflowJob bean found by name ({@code elasticJobBean}): fetches at most two orders at a time. */
  public static final class BacklogJob implements DataflowJob<String> {
    final Deque<String> backlog = new ConcurrentLinkedDeque<>(List.of("o1", "o2", "o3", "o4", "o5"));
    final List<String> shipped = new CopyOnWriteArrayList<>();
    final AtomicInteger fetches = new AtomicInteger();

    @Override
    public List<String> fetchData(ShardingContext shardingContext) {
      fetches.incrementAndGet();
      List<String> batch = new ArrayList<>();
      for (int i = 0; i < 2 && !backlog.isEmpty(); i++) {
        batch.add(backlog.poll());
      }
      return batch;
    }

    @Override
    public void processData(ShardingContext shardingContext, List<String> data) {
      shipped.addAll(data);
    }
  }

  /** Not a bean: created with autowiring when its job starts. */
  public static final class CreatedJob implements SimpleJob {
    @Autowired
    AtomicInteger createdJobRuns;

    @Override
    public void execute(ShardingContext shardingContext) {
      createdJobRuns.incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    CitiesJob citiesJob() {
      return new CitiesJob();
    }

    @Bean
    BacklogJob backlogJob() {
      return new BacklogJob();
    }

    @Bean
    AtomicInteger createdJobRuns() {
      return new AtomicInteger();
    }

    /** The worker's listener (the starter wires a unique WorkerListener bean). */
    @Bean
    Recorder recorder() {
      return new Recorder();
    }
  }

  private static ConfigurableApplicationContext start(String profile, String... args) {
    SpringApplication app = new SpringApplication(App.class);
    app.setWebApplicationType(WebApplicationType.NONE);
    if (profile != null) {
      app.setAdditionalProfiles(profile);
    }
    return app.run(args);
  }

  private static Health shardcarHealth(ConfigurableApplicationContext context) {
    HealthComponent component = context.getBean(HealthEndpoint.class).healthForPath("shardcar");
    assertNotNull(component, "the health endpoint has a 'shardcar' contributor");
    return assertInstanceOf(Health.class, component);
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Map<String, Object>> jobDetails(Health health) {
    return (Map<String, Map<String, Object>>) health.getDetails().get("jobs");
  }

  private static void await(String what, BooleanSupplier condition) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out after " + WAIT + " waiting for " + what);
      }
      Processes.sleep(20);
    }
  }

  @Test
  void anApplicationRunsItsElasticJobBeansThroughTheSidecarAndReportsTheirHealth() {
    try (SidecarProcess sidecar = SidecarProcess.startStandalone();
        SidecarAdmin admin = new SidecarAdmin(sidecar)) {
      ConfigurableApplicationContext context = start("it", "--shardcar.target=" + sidecar.target());
      try {
        runAndCheck(sidecar, admin, context);
      } finally {
        context.close();
      }
    }
  }

  private static void runAndCheck(SidecarProcess sidecar, SidecarAdmin admin, ConfigurableApplicationContext context) {
    {
      ShardcarJobs jobs = context.getBean(ShardcarJobs.class);
      Recorder recorder = context.getBean(Recorder.class);

      // The SimpleJob bean (by class) runs on its cron with its yml settings.
      CitiesJob cities = context.getBean(CitiesJob.class);
      await("every city item run", () -> cities.seen.keySet().containsAll(Set.of(0, 1, 2)));
      assertEquals("Beijing", cities.seen.get(0).getShardingParameter());
      assertEquals("Guangzhou", cities.seen.get(2).getShardingParameter());
      assertEquals("region=cn", cities.seen.get(1).getJobParameter());
      assertEquals(3, cities.seen.get(1).getShardingTotalCount());
      JobRegistration citiesRegistration = jobs.getRegistration("it-cities").orElseThrow();
      assertTrue(citiesRegistration.getEffectiveConfig().isFailover());
      assertEquals(Boolean.TRUE, citiesRegistration.getEffectiveConfig().getMonitorExecution());

      // The job class that is no bean was created with autowiring, and runs.
      await("the created job run", () -> context.getBean("createdJobRuns", AtomicInteger.class).get() > 0);

      // The DataflowJob bean (by name) streams: one trigger ships the whole backlog.
      JobRegistration backlogRegistration = jobs.getRegistration("it-backlog").orElseThrow();
      assertTrue(backlogRegistration.getEffectiveConfig().isStreamingProcess(),
          "props.streaming.process bound from yml: " + backlogRegistration.getEffectiveConfig());
      assertEquals("ships the backlog", backlogRegistration.getEffectiveConfig().getDescription());
      BacklogJob backlog = context.getBean(BacklogJob.class);
      String execution = triggerUntilAnswered(admin, recorder, "it-backlog");
      assertEquals(List.of("o1", "o2", "o3", "o4", "o5"), backlog.shipped, "one execution " + execution);
      assertEquals(4, backlog.fetches.get(), "three batches, then an empty fetch");

      // Health: UP with every job registered.
      Health up = shardcarHealth(context);
      assertEquals(Status.UP, up.getStatus(), up.toString());
      assertEquals(sidecar.target(), up.getDetails().get("target"));
      Map<String, Map<String, Object>> details = jobDetails(up);
      assertEquals(Set.of("it-cities", "it-backlog", "it-created"), details.keySet());
      details.values().forEach(job -> assertEquals("ACTIVE", job.get("state"), up.toString()));
      assertEquals(Set.of(0, 1, 2), details.get("it-cities").get("items"));
      assertEquals(Boolean.TRUE, details.get("it-cities").get("leaseValid"));

      // The sidecar goes away: DOWN, with the registrations reconnecting.
      sidecar.kill();
      await("health DOWN", () -> shardcarHealth(context).getStatus().equals(Status.DOWN));
      Health down = shardcarHealth(context);
      assertFalse(jobDetails(down).values().stream().allMatch(j -> "ACTIVE".equals(j.get("state"))), down.toString());
      assertTrue(jobDetails(down).values().stream().anyMatch(j -> "RECONNECTING".equals(j.get("state"))),
          down.toString());

      // It comes back (same port): the worker subscribes again, UP again.
      sidecar.restart();
      await("health UP again", () -> shardcarHealth(context).getStatus().equals(Status.UP));

      context.close();
      assertTrue(jobs.getStatuses().stream().allMatch(s -> s.registration().getState() == JobRegistration.State.CLOSED),
          "closing the context closes the registrations");
    }
  }

  /** Triggers {@code job} until one of its executions was answered; returns that execution's id. */
  private static String triggerUntilAnswered(SidecarAdmin admin, Recorder recorder, String job) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (true) {
      admin.trigger(job);
      try {
        return recorder.await("an execution of " + job + " answered", Duration.ofSeconds(5),
            e -> e.kind().equals("Answered") && job.equals(e.jobName()) && e.error() == null).executionId();
      } catch (AssertionError e) {
        if (System.nanoTime() - deadline > 0) {
          throw e;
        }
        // not sharded yet: trigger again
      }
    }
  }

  @Test
  void aJobThatCannotBeRegisteredFailsTheStartupByDefault() {
    String nowhere = "127.0.0.1:" + Processes.freePort();
    RuntimeException e = assertThrows(RuntimeException.class, () -> start(null,
        "--shardcar.target=" + nowhere,
        "--shardcar.connect-timeout=1s",
        "--shardcar.jobs.lonely.elasticJobClass=" + CitiesJob.class.getName(),
        "--shardcar.jobs.lonely.shardingTotalCount=1").close());
    assertTrue(hasCause(e, SidecarUnavailableException.class), "fails with the client's error: " + e);
  }

  @Test
  void withoutFailFastTheApplicationStartsAndTheJobIsDown() {
    String nowhere = "127.0.0.1:" + Processes.freePort();
    try (ConfigurableApplicationContext context = start(null,
        "--shardcar.target=" + nowhere,
        "--shardcar.connect-timeout=1s",
        "--shardcar.fail-fast=false",
        "--shardcar.jobs.lonely.elasticJobClass=" + CitiesJob.class.getName(),
        "--shardcar.jobs.lonely.shardingTotalCount=1")) {
      Health health = shardcarHealth(context);
      assertEquals(Status.DOWN, health.getStatus());
      Map<String, Object> lonely = jobDetails(health).get("lonely");
      assertEquals("FAILED", lonely.get("state"), health.toString());
      assertTrue(String.valueOf(lonely.get("error")).startsWith("SidecarUnavailableException"), health.toString());
    }
  }

  private static boolean hasCause(Throwable t, Class<? extends Throwable> type) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (type.isInstance(c)) {
        return true;
      }
    }
    return false;
  }
}
