package io.shardcar.interop.harness;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads ElasticJob's RDB event-tracing tables ({@code JOB_EXECUTION_LOG}, {@code JOB_STATUS_TRACE_LOG})
 * and the catalog of the schema they are in, whoever wrote them: an ElasticJob JVM with
 * {@code TracingConfiguration("RDB", dataSource)} or a sidecar with {@code --tracing-db}.
 */
public final class TracingTables {
  private TracingTables() {}

  /** One row of {@code JOB_EXECUTION_LOG}. */
  public record ExecRow(String id, String jobName, String taskId, String hostname, String ip, int item, String source,
      String failureCause, boolean success, LocalDateTime start, LocalDateTime complete) {}

  /** One row of {@code JOB_STATUS_TRACE_LOG}. */
  public record StatusRow(String id, String jobName, String originalTaskId, String taskId, String slaveId, String source,
      String executionType, String shardingItem, String state, String message, LocalDateTime creation) {}

  /** Every row of {@code JOB_EXECUTION_LOG}; none while the table does not exist. */
  public static List<ExecRow> executionRows(Connection c) {
    List<ExecRow> out = new ArrayList<>();
    query(c, "SELECT id, job_name, task_id, hostname, ip, sharding_item, execution_source, failure_cause, is_success, "
        + "start_time, complete_time FROM job_execution_log", rs -> out.add(new ExecRow(rs.getString(1), rs.getString(2),
            rs.getString(3), rs.getString(4), rs.getString(5), rs.getInt(6), rs.getString(7), rs.getString(8),
            rs.getBoolean(9), rs.getObject(10, LocalDateTime.class), rs.getObject(11, LocalDateTime.class))));
    return out;
  }

  /** Every row of {@code JOB_STATUS_TRACE_LOG}; none while the table does not exist. */
  public static List<StatusRow> statusRows(Connection c) {
    List<StatusRow> out = new ArrayList<>();
    query(c, "SELECT id, job_name, original_task_id, task_id, slave_id, source, execution_type, sharding_item, state, "
        + "message, creation_time FROM job_status_trace_log", rs -> out.add(new StatusRow(rs.getString(1), rs.getString(2),
            rs.getString(3), rs.getString(4), rs.getString(5), rs.getString(6), rs.getString(7), rs.getString(8),
            rs.getString(9), rs.getString(10), rs.getObject(11, LocalDateTime.class))));
    return out;
  }

  /**
   * The catalog of the {@code public} schema, one line per fact: every column (table, name, type, length,
   * nullability), every primary key, every index definition.
   */
  public static List<String> catalog(Connection c) {
    List<String> out = new ArrayList<>();
    query(c, "SELECT table_name::text, column_name::text, data_type::text, character_maximum_length, is_nullable::text "
        + "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
        rs -> {
          int length = rs.getInt(4);
          out.add(rs.getString(1) + "." + rs.getString(2) + " " + rs.getString(3) + (rs.wasNull() ? "" : "(" + length + ")")
              + ("YES".equals(rs.getString(5)) ? " NULL" : " NOT NULL"));
        });
    query(c, "SELECT tc.table_name::text, kcu.column_name::text FROM information_schema.table_constraints tc "
        + "JOIN information_schema.key_column_usage kcu ON kcu.constraint_schema = tc.constraint_schema "
        + "AND kcu.constraint_name = tc.constraint_name WHERE tc.constraint_type = 'PRIMARY KEY' "
        + "AND tc.table_schema = 'public' ORDER BY 1, kcu.ordinal_position",
        rs -> out.add(rs.getString(1) + " PRIMARY KEY (" + rs.getString(2) + ")"));
    query(c, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname",
        rs -> out.add(rs.getString(1)));
    return out;
  }

  private interface RowReader {
    void read(ResultSet rs) throws SQLException;
  }

  private static void query(Connection c, String sql, RowReader reader) {
    try (PreparedStatement s = c.prepareStatement(sql); ResultSet rs = s.executeQuery()) {
      while (rs.next()) {
        reader.read(rs);
      }
    } catch (SQLException e) {
      if ("42P01".equals(e.getSQLState())) {
        return; // undefined table: not created yet
      }
      throw new IllegalStateException(sql, e);
    }
  }
}
